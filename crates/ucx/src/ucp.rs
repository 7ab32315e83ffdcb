//! Safe wrappers over [`crate::sys`]: context, worker, endpoint, remote key, UCX-allocated pool,
//! and request completion.
//!
//! Ownership mirrors UCX's rules: a [`Worker`] owns its context; endpoints and remote keys must
//! be dropped before their worker (callers hold them in fields declared before it).

use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::ptr;

use crate::sys::*;

/// A UCX call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {message} (UCX status {status})")]
pub struct UcxError {
    pub what: &'static str,
    pub status: i8,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, UcxError>;

fn check(what: &'static str, status: ucs_status_t) -> Result<()> {
    if status == UCS_OK {
        return Ok(());
    }
    // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string for any
    // status value.
    let message = unsafe { CStr::from_ptr(ucs_status_string(status)) }.to_string_lossy().into();
    Err(UcxError { what, status, message })
}

/// A request UCX handed back for an operation in flight (only made from a `*_nbx` result).
#[derive(Debug)]
pub struct Request(*mut c_void);

/// A non-blocking operation's outcome at posting time.
pub enum Posted {
    /// Completed in place.
    Done,
    /// In flight: poll with [`Worker::check`], then [`Worker::free`].
    Pending(Request),
}

fn posted(what: &'static str, p: ucs_status_ptr_t) -> Result<Posted> {
    if p.is_null() {
        Ok(Posted::Done)
    } else if p as isize >= UCS_ERR_LAST && (p as isize) < 0 {
        check(what, p as isize as ucs_status_t).map(|()| Posted::Done)
    } else {
        Ok(Posted::Pending(Request(p)))
    }
}

/// A received active message's handler: header, payload, and the endpoint to reply on (when the
/// sender asked for replies).
pub type MessageHandler = Box<dyn FnMut(&[u8], &[u8], Option<ReplyEndpoint>)>;

/// A UCP worker and the context it was created from (one per thread: single-threaded mode).
pub struct Worker {
    worker: ucp_worker_h,
    context: ucp_context_h,
    /// Active-message handlers; UCX holds a thin pointer to each (the outer box keeps its
    /// address as the vector grows) until the worker is destroyed.
    #[allow(clippy::vec_box)]
    handlers: Vec<Box<MessageHandler>>,
}

impl Worker {
    /// A context with RMA, 64-bit atomics, active messages and wakeup (configured from `UCX_*`
    /// variables) and a worker: a client's. It connects to memnodes whether or not theirs
    /// enable RMA ([`Worker::waking`]); its endpoints' lanes say which verbs are one-sided. A
    /// thread whose tasks all wait blocks on it ([`Worker::arm`]).
    pub fn new() -> Result<Worker> {
        let features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
        Self::with_features(features, None)
    }

    /// A memnode's worker: one that can also sleep until communication arrives
    /// ([`Worker::sleep`]), as a memnode has nothing to do between its clients' messages. With
    /// `one_sided`, UCX's RMA and atomics too, for transports with real one-sided access
    /// (shared memory, RDMA); without, active messages only, so the worker installs no handler
    /// for UCX's software GET, PUT and atomics, which take a raw address and check no remote
    /// key ([`crate::tls`]). With `devices`, UCX uses (and listens on) those network devices
    /// only (`NET_DEVICES`).
    pub fn waking(devices: Option<&str>, one_sided: bool) -> Result<Worker> {
        let rma = match one_sided {
            true => UCP_FEATURE_RMA | UCP_FEATURE_AMO64,
            false => 0,
        };
        Self::with_features(rma | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, devices)
    }

    fn with_features(features: u64, devices: Option<&str>) -> Result<Worker> {
        log_to_stderr();
        let mut settings = vec![(c"MAX_EAGER_RAILS", std::ffi::CString::from(c"1"))];
        if let Some(d) = devices {
            let d = std::ffi::CString::new(d).map_err(|_| UcxError {
                what: "NET_DEVICES",
                status: UCS_ERR_INVALID_PARAM,
                message: "a device name with a NUL byte".into(),
            })?;
            settings.push((c"NET_DEVICES", d));
        }
        let mut config: *mut ucp_config = ptr::null_mut();
        // SAFETY: null prefix and file select the defaults; config receives a handle we release.
        check("ucp_config_read", unsafe {
            ucp_config_read(ptr::null(), ptr::null(), &mut config)
        })?;
        // Verb messages rely on an endpoint's messages arriving in order: one eager lane. And
        // the network devices to use, if given.
        for (name, value) in &settings {
            // SAFETY: config is live; both strings are NUL-terminated.
            let st = unsafe { ucp_config_modify(config, name.as_ptr(), value.as_ptr()) };
            if let Err(e) = check("ucp_config_modify", st) {
                // SAFETY: config came from ucp_config_read and is released once.
                unsafe { ucp_config_release(config) };
                return Err(e);
            }
        }
        let params = ucp_params_t {
            field_mask: UCP_PARAM_FIELD_FEATURES,
            features,
            request_size: 0,
            request_init: ptr::null(),
            request_cleanup: ptr::null(),
            tag_sender_mask: 0,
            mt_workers_shared: 0,
            estimated_num_eps: 0,
            estimated_num_ppn: 0,
            name: ptr::null(),
        };
        let mut context: ucp_context_h = ptr::null_mut();
        // SAFETY: params is a valid ucp_params_t of the 1.13 layout (pinned by sys tests);
        // config came from ucp_config_read and is released right after.
        let st = unsafe {
            let st = ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &mut context);
            ucp_config_release(config);
            st
        };
        check("ucp_init", st)?;
        let wp = ucp_worker_params_t {
            field_mask: UCP_WORKER_PARAM_FIELD_THREAD_MODE,
            thread_mode: UCS_THREAD_MODE_SINGLE,
            _rest: [0; 188],
        };
        let mut worker: ucp_worker_h = ptr::null_mut();
        // SAFETY: context is live; wp has the C layout with only the thread mode set.
        let st = unsafe { ucp_worker_create(context, &wp, &mut worker) };
        if let Err(e) = check("ucp_worker_create", st) {
            // SAFETY: the context is ours and nothing else uses it.
            unsafe { ucp_cleanup(context) };
            return Err(e);
        }
        Ok(Worker { worker, context, handlers: Vec::new() })
    }

    /// This worker's address, for peers to connect to.
    pub fn address(&self) -> Result<Vec<u8>> {
        let mut a: *mut ucp_address = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the worker is live; UCX fills a buffer we copy and release.
        unsafe {
            check("ucp_worker_get_address", ucp_worker_get_address(self.worker, &mut a, &mut len))?;
            let v = std::slice::from_raw_parts(a as *const u8, len).to_vec();
            ucp_worker_release_address(self.worker, a);
            Ok(v)
        }
    }

    /// Makes progress on outstanding communication; returns whether anything happened.
    pub fn progress(&self) -> bool {
        // SAFETY: the worker is live and used by this thread only.
        unsafe { ucp_worker_progress(self.worker) != 0 }
    }

    /// Prepares to block until this worker has communication to progress: its event
    /// descriptor, to wait for readability, or `None` if events are already pending (progress
    /// first). Every event that arrives after this call makes the descriptor readable.
    pub fn arm(&self) -> Result<Option<std::ffi::c_int>> {
        let mut efd: std::ffi::c_int = -1;
        // SAFETY: the worker is live; UCX writes its event descriptor into efd.
        check("ucp_worker_get_efd", unsafe { ucp_worker_get_efd(self.worker, &mut efd) })?;
        // SAFETY: the worker is live.
        match unsafe { ucp_worker_arm(self.worker) } {
            UCS_ERR_BUSY => Ok(None),
            st => check("ucp_worker_arm", st).map(|()| Some(efd)),
        }
    }

    /// Sleeps until this worker has communication to progress, `also` can be read, or
    /// `timeout_ms` pass; returns at once if events are pending. Whether `also` can be read.
    pub fn sleep(&self, also: std::ffi::c_int, timeout_ms: std::ffi::c_int) -> Result<bool> {
        let Some(efd) = self.arm()? else { return Ok(false) };
        let mut fds = [
            libc::pollfd { fd: efd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: also, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: fds is a valid array of two pollfd for the call's duration; a failed poll
        // (EINTR) only ends the sleep early.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        Ok(ready > 0 && fds[1].revents != 0)
    }

    /// Orders every later operation after every earlier one (remote completion order).
    pub fn fence(&self) -> Result<()> {
        // SAFETY: the worker is live.
        check("ucp_worker_fence", unsafe { ucp_worker_fence(self.worker) })
    }

    /// Starts flushing every outstanding operation to remote completion.
    pub fn flush(&self) -> Result<Posted> {
        let p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        // SAFETY: the worker is live; p is a valid parameter block.
        posted("ucp_worker_flush_nbx", unsafe { ucp_worker_flush_nbx(self.worker, &p) })
    }

    /// Whether request `r` finished (`Ok(true)`), failed, or is still running.
    pub fn check(&self, r: &Request) -> Result<bool> {
        // SAFETY: r is a live request returned by a *_nbx call and not yet freed (free
        // consumes it).
        match unsafe { ucp_request_check_status(r.0) } {
            UCS_INPROGRESS => Ok(false),
            s => check("request", s).map(|()| true),
        }
    }

    /// Releases a finished request.
    pub fn free(&self, r: Request) {
        // SAFETY: r is a live request, freed once (free consumes it); UCX lets a request be
        // freed before completion, which only happens on paths that waited for it first.
        unsafe { ucp_request_free(r.0) }
    }

    /// Progresses until `p` completes (blocking).
    pub fn wait(&self, p: Posted) -> Result<()> {
        let Posted::Pending(r) = p else { return Ok(()) };
        loop {
            self.progress();
            match self.check(&r) {
                Ok(false) => continue,
                done => {
                    self.free(r);
                    return done.map(drop);
                }
            }
        }
    }

    /// Progresses until `p` completes or `deadline` passes; `Ok(false)` if it passed (the
    /// request is then released to finish on its own: only for requests that use no buffers of
    /// ours, such as flushes).
    pub fn wait_until(&self, p: Posted, deadline: std::time::Instant) -> Result<bool> {
        let Posted::Pending(r) = p else { return Ok(true) };
        let mut polls = 0u32;
        loop {
            self.progress();
            match self.check(&r) {
                Ok(false) => {}
                done => {
                    self.free(r);
                    return done.map(|_| true);
                }
            }
            polls = polls.wrapping_add(1);
            if polls % 64 == 0 && std::time::Instant::now() >= deadline {
                self.free(r);
                return Ok(false);
            }
        }
    }

    /// Calls `handler` for every active message `id` that arrives (from within
    /// [`Worker::progress`], whole messages only).
    pub fn on_message(&mut self, id: u32, handler: MessageHandler) -> Result<()> {
        let mut boxed = Box::new(handler);
        let arg: *mut MessageHandler = &mut *boxed;
        let param = ucp_am_handler_param_t {
            field_mask: UCP_AM_HANDLER_PARAM_FIELD_ID
                | UCP_AM_HANDLER_PARAM_FIELD_FLAGS
                | UCP_AM_HANDLER_PARAM_FIELD_CB
                | UCP_AM_HANDLER_PARAM_FIELD_ARG,
            id,
            flags: UCP_AM_FLAG_WHOLE_MSG,
            cb: Some(message_trampoline),
            arg: arg as *mut c_void,
        };
        // SAFETY: the worker is live; `arg` points into a box kept in `self.handlers` until the
        // worker is destroyed (after which UCX calls no handler).
        check("ucp_worker_set_am_recv_handler", unsafe {
            ucp_worker_set_am_recv_handler(self.worker, &param)
        })?;
        self.handlers.push(boxed);
        Ok(())
    }

    /// An endpoint to the worker whose address is `address`.
    ///
    /// Peer error handling first: over TCP the memnode's reply endpoint to this client inherits
    /// it, so the memnode's wireup with a client that died is an endpoint error, not a fatal
    /// one (UCX 1.13.1 still aborts on a failed verb completion: see docs/ucx.md). Shared
    /// memory transports do not offer that mode in UCX 1.13 (and need no reply endpoint: their
    /// RMA is one-sided), so an unreachable answer falls back to no error handling.
    pub fn connect(&self, address: &[u8]) -> Result<Endpoint> {
        // Skip the (logged) failed attempt when UCX_TLS names only shared-memory transports.
        let shm_only = std::env::var("UCX_TLS").is_ok_and(|t| {
            !t.starts_with('^')
                && t.split(',').all(|x| {
                    matches!(
                        x.trim(),
                        "sm" | "shm" | "self" | "posix" | "sysv" | "cma" | "knem" | "xpmem"
                    )
                })
        });
        if shm_only {
            return self.connect_with(address, UCP_ERR_HANDLING_MODE_NONE);
        }
        match self.connect_with(address, UCP_ERR_HANDLING_MODE_PEER) {
            Err(e) if e.status == UCS_ERR_UNREACHABLE => {
                self.connect_with(address, UCP_ERR_HANDLING_MODE_NONE)
            }
            r => r,
        }
    }

    fn connect_with(&self, address: &[u8], err_mode: std::ffi::c_int) -> Result<Endpoint> {
        let failure = Box::new(Cell::new(UCS_OK));
        let peer = err_mode == UCP_ERR_HANDLING_MODE_PEER;
        let params = ucp_ep_params_t {
            field_mask: UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | if peer { UCP_EP_PARAM_FIELD_ERR_HANDLER } else { 0 },
            address: address.as_ptr() as *const ucp_address,
            err_mode,
            err_handler_cb: Some(endpoint_failed),
            err_handler_arg: &*failure as *const Cell<ucs_status_t> as *mut c_void,
            _rest: [0; 64],
        };
        let mut ep: ucp_ep_h = ptr::null_mut();
        // SAFETY: the worker is live; address is a worker address a peer produced and UCX copies
        // what it needs during the call; the error handler's argument is boxed in the endpoint,
        // which closes the UCX endpoint before freeing it.
        check("ucp_ep_create", unsafe { ucp_ep_create(self.worker, &params, &mut ep) })?;
        Ok(Endpoint { ep, worker: self.worker, failure })
    }

    /// A pool of `len` bytes allocated and registered by UCX (`UCP_MEM_MAP_ALLOCATE`, so shared
    /// memory transports can reach it one-sidedly).
    pub fn map_pool(&self, len: usize) -> Result<Pool> {
        let params = ucp_mem_map_params_t {
            field_mask: UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
            address: ptr::null_mut(),
            length: len,
            flags: UCP_MEM_MAP_ALLOCATE,
            prot: 0,
            memory_type: 0,
            _pad: 0,
        };
        let mut memh: ucp_mem_h = ptr::null_mut();
        // SAFETY: the context is live; params asks UCX to allocate `len` bytes.
        check("ucp_mem_map", unsafe { ucp_mem_map(self.context, &params, &mut memh) })?;
        let mut attr = ucp_mem_attr_t {
            field_mask: UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH,
            address: ptr::null_mut(),
            length: 0,
            mem_type: 0,
            _pad: 0,
        };
        // SAFETY: memh was just mapped.
        check("ucp_mem_query", unsafe { ucp_mem_query(memh, &mut attr) })?;
        let mut rkey: *mut c_void = ptr::null_mut();
        let mut rlen = 0usize;
        // SAFETY: memh is live; UCX fills a buffer we copy and release.
        let rkey_bytes = unsafe {
            check("ucp_rkey_pack", ucp_rkey_pack(self.context, memh, &mut rkey, &mut rlen))?;
            let v = std::slice::from_raw_parts(rkey as *const u8, rlen).to_vec();
            ucp_rkey_buffer_release(rkey);
            v
        };
        Ok(Pool {
            context: self.context,
            memh,
            base: attr.address as *mut u8,
            len: attr.length.min(len),
            rkey: rkey_bytes,
        })
    }
}

/// UCX's active-message callback: hands the message to the Rust handler `arg` points to.
unsafe extern "C" fn message_trampoline(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t {
    // SAFETY: `arg` is the boxed handler registered in `on_message`, alive as long as the worker
    // calling us; UCX calls handlers from this thread's progress only, one at a time.
    let handler = unsafe { &mut *(arg as *mut MessageHandler) };
    let bytes = |p: *const c_void, n: usize| {
        if n == 0 || p.is_null() {
            &[][..]
        } else {
            // SAFETY: UCX passes `n` readable bytes at `p` for the duration of the callback.
            unsafe { std::slice::from_raw_parts(p as *const u8, n) }
        }
    };
    // SAFETY: UCX passes a valid parameter block for the duration of the callback.
    let param = unsafe { &*param };
    if param.recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV != 0 {
        // A rendezvous descriptor, not data: our peers send eagerly only, so it is not ours.
        return UCS_OK;
    }
    let reply = (param.recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP != 0)
        .then_some(ReplyEndpoint { ep: param.reply_ep });
    handler(bytes(header, header_length), bytes(data, length), reply);
    // The data is not kept past the callback.
    UCS_OK
}

/// UCX's endpoint error callback: records the failure for [`Endpoint::failure`].
unsafe extern "C" fn endpoint_failed(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: `arg` is the endpoint's boxed failure cell, alive until after the endpoint is
    // closed; UCX calls this from this thread's progress.
    unsafe { &*(arg as *const Cell<ucs_status_t>) }.set(status);
}

/// Frees a reply's bytes once UCX is done sending them.
unsafe extern "C" fn reply_sent(
    request: *mut c_void,
    _status: ucs_status_t,
    user_data: *mut c_void,
) {
    // SAFETY: user_data is the box leaked in `ReplyEndpoint::send` for this request, freed
    // once here; the request came from ucp_am_send_nbx and is freed once.
    unsafe {
        drop(Box::from_raw(user_data as *mut Vec<u8>));
        ucp_request_free(request);
    }
}

/// The endpoint an active message came from, usable while its handler runs.
pub struct ReplyEndpoint {
    ep: ucp_ep_h,
}

impl ReplyEndpoint {
    /// Sends active message `id` (header `message[..header_len]`, payload the rest) eagerly,
    /// owning the bytes until UCX is done. A peer that went away is no error of ours: the
    /// message is dropped (UCX completes the send with an error instead of aborting).
    pub fn send(&self, id: u32, message: Vec<u8>, header_len: usize) {
        assert!(header_len <= message.len());
        let owned = Box::into_raw(Box::new(message));
        let mut p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_AM_SEND_FLAG_EAGER;
        p.cb = reply_sent as *const c_void;
        p.user_data = owned as *mut c_void;
        // SAFETY: the endpoint is live during the handler; the bytes are boxed and freed by
        // `reply_sent` when UCX returns a request, or right here otherwise.
        unsafe {
            let m = &*owned;
            let r = ucp_am_send_nbx(
                self.ep,
                id,
                m.as_ptr() as *const c_void,
                header_len,
                m.as_ptr().add(header_len) as *const c_void,
                m.len() - header_len,
                &p,
            );
            if r.is_null() || ((r as isize) < 0 && (r as isize) >= UCS_ERR_LAST) {
                drop(Box::from_raw(owned));
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: endpoints, keys and pools of this worker were dropped before it (ownership
        // rule above); the handles are destroyed once.
        unsafe {
            ucp_worker_destroy(self.worker);
            ucp_cleanup(self.context);
        }
    }
}

/// A connection to a peer worker.
pub struct Endpoint {
    ep: ucp_ep_h,
    worker: ucp_worker_h,
    /// Set by UCX's error callback (peer error mode) when the connection fails.
    failure: Box<Cell<ucs_status_t>>,
}

impl Endpoint {
    /// The error the connection failed with, if it did (peer error mode only).
    pub fn failure(&self) -> Option<UcxError> {
        check("endpoint", self.failure.get()).err()
    }

    /// Whether verbs on this endpoint reach the peer's memory without its CPU: some lane carries
    /// atomics (shared memory, RDMA). Otherwise (TCP) UCX would emulate RMA and atomics on the
    /// peer's CPU. Read from UCX's description of the endpoint's lanes, so ask after wireup.
    pub fn one_sided(&self) -> bool {
        self.lanes().lines().any(|l| l.contains("lane[") && l.contains(" amo#"))
    }

    /// UCX's description of this endpoint (`ucp_ep_print_info`).
    fn lanes(&self) -> String {
        let mut buf: *mut c_char = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: open_memstream gives a stream writing into a malloc'd buffer that is valid
        // (NUL-terminated, `len` bytes) after fclose; we copy it and free it once.
        unsafe {
            let f = open_memstream(&mut buf, &mut len);
            if f.is_null() {
                return String::new();
            }
            ucp_ep_print_info(self.ep, f);
            fclose(f);
            if buf.is_null() {
                return String::new();
            }
            let text = String::from_utf8_lossy(std::slice::from_raw_parts(buf as *const u8, len))
                .into_owned();
            free(buf as *mut c_void);
            text
        }
    }

    /// Posts active message `id` with `header` and `payload`, eagerly, asking for replies on
    /// this endpoint.
    ///
    /// # Safety
    /// `header` and `payload` must stay valid and unmodified until the send completes.
    pub unsafe fn send_message(&self, id: u32, header: &[u8], payload: &[u8]) -> Result<Posted> {
        let mut p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
        // SAFETY: live endpoint; the caller keeps the bytes alive until completion.
        posted("ucp_am_send_nbx", unsafe {
            ucp_am_send_nbx(
                self.ep,
                id,
                header.as_ptr() as *const c_void,
                header.len(),
                payload.as_ptr() as *const c_void,
                payload.len(),
                &p,
            )
        })
    }

    /// Starts flushing this endpoint's operations (and its wireup) to remote completion.
    pub fn flush(&self) -> Result<Posted> {
        let p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        // SAFETY: the endpoint is live; p is a valid parameter block.
        posted("ucp_ep_flush_nbx", unsafe { ucp_ep_flush_nbx(self.ep, &p) })
    }

    /// Unpacks a peer's packed remote key for use on this endpoint.
    pub fn unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
        let mut k: ucp_rkey_h = ptr::null_mut();
        // SAFETY: the endpoint is live; packed came from the peer's ucp_rkey_pack.
        check("ucp_ep_rkey_unpack", unsafe {
            ucp_ep_rkey_unpack(self.ep, packed.as_ptr() as *const c_void, &mut k)
        })?;
        Ok(RemoteKey { k })
    }

    /// Posts a WRITE of `data` to remote `addr`.
    ///
    /// # Safety
    /// `data` must stay valid and unmodified until the operation completes.
    pub unsafe fn put(&self, data: &[u8], addr: u64, key: &RemoteKey) -> Result<Posted> {
        let p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        // SAFETY: live endpoint and key; the caller keeps data alive until completion.
        posted("ucp_put_nbx", unsafe {
            ucp_put_nbx(self.ep, data.as_ptr() as *const c_void, data.len(), addr, key.k, &p)
        })
    }

    /// Posts a WRITE of `data` to remote `addr` asking UCX to complete it in the call:
    /// `Ok(None)` if UCX cannot (nothing was posted), else what it posted. UCX 1.13's legacy
    /// protocols honour the request (`Posted::Done`); its newer ones ignore it and may return a
    /// request in flight.
    ///
    /// # Safety
    /// `data` must stay valid and unmodified until a returned request completes.
    pub unsafe fn put_now(
        &self,
        data: &[u8],
        addr: u64,
        key: &RemoteKey,
    ) -> Result<Option<Posted>> {
        let mut p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        p.op_attr_mask |= UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
        // SAFETY: live endpoint and key; the caller keeps data alive until completion.
        let r = unsafe {
            ucp_put_nbx(self.ep, data.as_ptr() as *const c_void, data.len(), addr, key.k, &p)
        };
        if r as isize == UCS_ERR_NO_RESOURCE as isize {
            return Ok(None);
        }
        posted("ucp_put_nbx", r).map(Some)
    }

    /// Posts a READ of remote `addr` into `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid and untouched until the operation completes.
    pub unsafe fn get(&self, buf: &mut [u8], addr: u64, key: &RemoteKey) -> Result<Posted> {
        let p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        // SAFETY: live endpoint and key; the caller keeps buf alive until completion.
        posted("ucp_get_nbx", unsafe {
            ucp_get_nbx(self.ep, buf.as_mut_ptr() as *mut c_void, buf.len(), addr, key.k, &p)
        })
    }

    /// Posts a fetching 64-bit atomic. CSWAP: `operand` is the compare value and `reply` carries
    /// the new value in and the old value out; ADD/OR: `operand` is the argument and `reply`
    /// receives the old value.
    ///
    /// # Safety
    /// `operand` and `reply` must stay valid until the operation completes.
    pub unsafe fn atomic(
        &self,
        op: ucp_atomic_op_t,
        operand: *const u64,
        reply: *mut u64,
        addr: u64,
        key: &RemoteKey,
    ) -> Result<Posted> {
        let p = ucp_request_param_t::new(UCP_DATATYPE_U64, reply as *mut c_void);
        // SAFETY: live endpoint and key; the caller keeps operand and reply alive.
        posted("ucp_atomic_op_nbx", unsafe {
            ucp_atomic_op_nbx(self.ep, op, operand as *const c_void, 1, addr, key.k, &p)
        })
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let mut p = ucp_request_param_t::new(UCP_DATATYPE_BYTES, ptr::null_mut());
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        // SAFETY: the endpoint and its worker are live; a forced close needs no peer reply and
        // we progress the worker until it completes, then free the request once.
        unsafe {
            let r = ucp_ep_close_nbx(self.ep, &p);
            if !r.is_null() && (r as isize) > 0 {
                while ucp_request_check_status(r) == UCS_INPROGRESS {
                    ucp_worker_progress(self.worker);
                }
                ucp_request_free(r);
            }
        }
    }
}

/// A peer's memory key, unpacked for one endpoint.
pub struct RemoteKey {
    k: ucp_rkey_h,
}

impl RemoteKey {
    /// Where remote `addr` is mapped in this process, if a transport mapped the peer's memory
    /// (shared memory does; RDMA and TCP do not). The mapping lives as long as this key.
    pub fn local_ptr(&self, addr: u64) -> Option<*mut u8> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the key is live; UCX writes the pointer only on success.
        let status = unsafe { ucp_rkey_ptr(self.k, addr, &mut p) };
        (status == UCS_OK && !p.is_null()).then_some(p as *mut u8)
    }
}

impl Drop for RemoteKey {
    fn drop(&mut self) {
        // SAFETY: the key is live and destroyed once, before its endpoint's worker.
        unsafe { ucp_rkey_destroy(self.k) }
    }
}

/// Memory UCX allocated and registered (the memnode's pool).
pub struct Pool {
    context: ucp_context_h,
    memh: ucp_mem_h,
    pub base: *mut u8,
    pub len: usize,
    /// The packed remote key clients unpack.
    pub rkey: Vec<u8>,
}

// SAFETY: the pool is plain memory; concurrent access is through atomics or copies whose
// tearing the fabric's semantics allow (see `server`).
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: memh was mapped by this context, which outlives the pool (the server drops
        // the pool before its worker).
        unsafe {
            ucp_mem_unmap(self.context, self.memh);
        }
    }
}

/// Sends UCX's own log (warnings such as a peer's endpoint failing) to standard error, where a
/// command's diagnostics go, instead of UCX's default, standard output, which `--json` and the
/// tests' protocols keep for their own output. UCX opens its log when the library loads, before
/// `main`; it is reopened once here, before this process makes its first UCX object. A
/// `UCX_LOG_FILE` the user set is left as it is.
fn log_to_stderr() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("UCX_LOG_FILE").is_some() {
            return;
        }
        // SAFETY: no UCX object exists yet in this process (this runs before the first
        // context), so nothing logs while the log is closed and opened again; both strings are
        // NUL-terminated.
        let st = unsafe {
            ucs_log_cleanup();
            let st = ucs_global_opts_set_value(c"LOG_FILE".as_ptr(), c"stderr".as_ptr());
            ucs_log_init();
            st
        };
        if let Err(e) = check("ucs_global_opts_set_value(LOG_FILE)", st) {
            eprintln!("UCX's log stays on standard output: {e}");
        }
    });
}
