//! Hand-written bindings to the subset of `ucp` (OpenUCX 1.13.1, Debian's libucx-dev) dmindex
//! uses. Struct layouts and constants were read from `ucp/api/ucp.h` and checked with a C probe
//! compiled against it; the tests below pin every size and offset we rely on (a mismatch with
//! another UCX release fails them rather than corrupting memory).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type ucs_status_t = i8;
pub type ucs_status_ptr_t = *mut c_void;
pub type ucp_datatype_t = u64;

pub const UCS_OK: ucs_status_t = 0;
pub const UCS_INPROGRESS: ucs_status_t = 1;
pub const UCS_ERR_UNREACHABLE: ucs_status_t = -6;
pub const UCS_ERR_NO_RESOURCE: ucs_status_t = -2;
pub const UCS_ERR_BUSY: ucs_status_t = -15;
pub const UCS_ERR_INVALID_PARAM: ucs_status_t = -5;
/// `UCS_ERR_LAST`: status pointers at or above `(uintptr_t)-100` are errors.
pub const UCS_ERR_LAST: isize = -100;

pub const UCP_API_MAJOR: c_uint = 1;
pub const UCP_API_MINOR: c_uint = 13;

pub const UCP_PARAM_FIELD_FEATURES: u64 = 1;
pub const UCP_FEATURE_RMA: u64 = 2;
pub const UCP_FEATURE_AMO64: u64 = 8;
pub const UCP_FEATURE_AM: u64 = 64;
pub const UCP_FEATURE_WAKEUP: u64 = 16;

pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1;
pub const UCS_THREAD_MODE_SINGLE: c_int = 0;

pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 2;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 4;
pub const UCP_ERR_HANDLING_MODE_NONE: c_int = 0;
pub const UCP_ERR_HANDLING_MODE_PEER: c_int = 1;

pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = 2;
pub const UCP_MEM_MAP_PARAM_FIELD_FLAGS: u64 = 4;
pub const UCP_MEM_MAP_ALLOCATE: c_uint = 2;
pub const UCP_MEM_ATTR_FIELD_ADDRESS: u64 = 1;
pub const UCP_MEM_ATTR_FIELD_LENGTH: u64 = 2;

pub const UCP_OP_ATTR_FIELD_CALLBACK: u32 = 2;
pub const UCP_OP_ATTR_FIELD_USER_DATA: u32 = 4;
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 8;
pub const UCP_OP_ATTR_FIELD_REPLY_BUFFER: u32 = 32;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 16;
/// Complete at once or fail with `UCS_ERR_NO_RESOURCE` (UCX 1.13's newer protocols ignore it).
pub const UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: u32 = 1 << 18;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1;

pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = 1;
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = 2;
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = 4;
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = 8;
/// Deliver a message only once all of it has arrived.
pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1;
pub const UCP_AM_SEND_FLAG_REPLY: u32 = 1;
pub const UCP_AM_SEND_FLAG_EAGER: u32 = 2;
pub const UCP_AM_RECV_ATTR_FIELD_REPLY_EP: u64 = 1;
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = 1 << 17;

/// `ucp_dt_make_contig(1)`: bytes.
pub const UCP_DATATYPE_BYTES: ucp_datatype_t = 8;
/// `ucp_dt_make_contig(8)`: 64-bit words (atomics).
pub const UCP_DATATYPE_U64: ucp_datatype_t = 64;

pub type ucp_atomic_op_t = c_int;
pub const UCP_ATOMIC_OP_ADD: ucp_atomic_op_t = 0;
pub const UCP_ATOMIC_OP_CSWAP: ucp_atomic_op_t = 2;
pub const UCP_ATOMIC_OP_OR: ucp_atomic_op_t = 4;

/// Opaque UCX handle types (only ever used behind pointers).
macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _p: [u8; 0],
        }
    )*};
}

opaque!(ucp_context, ucp_worker, ucp_ep, ucp_mem, ucp_rkey, ucp_config, ucp_address);

pub type ucp_context_h = *mut ucp_context;
pub type ucp_worker_h = *mut ucp_worker;
pub type ucp_ep_h = *mut ucp_ep;
pub type ucp_mem_h = *mut ucp_mem;
pub type ucp_rkey_h = *mut ucp_rkey;

#[repr(C)]
pub struct ucp_params_t {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: *const c_void,
    pub request_cleanup: *const c_void,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

/// Only `field_mask` and `thread_mode` are set; the rest is zeroed padding of the C size.
#[repr(C)]
pub struct ucp_worker_params_t {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub _rest: [u8; 188],
}

/// Only the first fields are set; the rest is zeroed padding of the C size.
#[repr(C)]
pub struct ucp_ep_params_t {
    pub field_mask: u64,
    pub address: *const ucp_address,
    pub err_mode: c_int,
    /// `err_handler.cb` and `err_handler.arg`.
    pub err_handler_cb: Option<ucp_err_handler_cb_t>,
    pub err_handler_arg: *mut c_void,
    pub _rest: [u8; 64],
}

pub type ucp_err_handler_cb_t =
    unsafe extern "C" fn(arg: *mut c_void, ep: ucp_ep_h, status: ucs_status_t);
pub type ucp_am_recv_callback_t = unsafe extern "C" fn(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t;

#[repr(C)]
pub struct ucp_am_handler_param_t {
    pub field_mask: u64,
    pub id: u32,
    pub flags: u32,
    pub cb: Option<ucp_am_recv_callback_t>,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_am_recv_param_t {
    pub recv_attr: u64,
    pub reply_ep: ucp_ep_h,
}

#[repr(C)]
pub struct ucp_mem_map_params_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_int,
    pub _pad: u32,
}

#[repr(C)]
pub struct ucp_mem_attr_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub mem_type: c_int,
    pub _pad: u32,
}

#[repr(C)]
pub struct ucp_request_param_t {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: *const c_void,
    pub datatype: ucp_datatype_t,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    pub _rest: [u8; 20],
}

/// A C stdio stream (only used behind pointers).
#[repr(C)]
pub struct FILE {
    _p: [u8; 0],
}

impl ucp_request_param_t {
    /// Parameters with the given datatype (and reply buffer, for fetching atomics).
    pub fn new(datatype: ucp_datatype_t, reply: *mut c_void) -> ucp_request_param_t {
        ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_DATATYPE
                | if reply.is_null() { 0 } else { UCP_OP_ATTR_FIELD_REPLY_BUFFER },
            flags: 0,
            request: std::ptr::null_mut(),
            cb: std::ptr::null(),
            datatype,
            user_data: std::ptr::null_mut(),
            reply_buffer: reply,
            memory_type: 0,
            _rest: [0; 20],
        }
    }
}

#[link(name = "ucp")]
#[link(name = "ucs")]
extern "C" {
    pub fn ucp_config_read(
        env_prefix: *const c_char,
        filename: *const c_char,
        config_p: *mut *mut ucp_config,
    ) -> ucs_status_t;
    pub fn ucp_config_release(config: *mut ucp_config);
    pub fn ucp_config_modify(
        config: *mut ucp_config,
        name: *const c_char,
        value: *const c_char,
    ) -> ucs_status_t;
    pub fn ucp_init_version(
        api_major_version: c_uint,
        api_minor_version: c_uint,
        params: *const ucp_params_t,
        config: *const ucp_config,
        context_p: *mut ucp_context_h,
    ) -> ucs_status_t;
    pub fn ucp_cleanup(context: ucp_context_h);
    pub fn ucp_worker_create(
        context: ucp_context_h,
        params: *const ucp_worker_params_t,
        worker_p: *mut ucp_worker_h,
    ) -> ucs_status_t;
    pub fn ucp_worker_destroy(worker: ucp_worker_h);
    pub fn ucp_worker_get_address(
        worker: ucp_worker_h,
        address_p: *mut *mut ucp_address,
        address_length_p: *mut usize,
    ) -> ucs_status_t;
    pub fn ucp_worker_release_address(worker: ucp_worker_h, address: *mut ucp_address);
    pub fn ucp_worker_progress(worker: ucp_worker_h) -> c_uint;
    pub fn ucp_worker_fence(worker: ucp_worker_h) -> ucs_status_t;
    pub fn ucp_worker_flush_nbx(
        worker: ucp_worker_h,
        param: *const ucp_request_param_t,
    ) -> ucs_status_ptr_t;
    pub fn ucp_ep_create(
        worker: ucp_worker_h,
        params: *const ucp_ep_params_t,
        ep_p: *mut ucp_ep_h,
    ) -> ucs_status_t;
    pub fn ucp_ep_close_nbx(ep: ucp_ep_h, param: *const ucp_request_param_t) -> ucs_status_ptr_t;
    pub fn ucp_ep_flush_nbx(ep: ucp_ep_h, param: *const ucp_request_param_t) -> ucs_status_ptr_t;
    pub fn ucp_mem_map(
        context: ucp_context_h,
        params: *const ucp_mem_map_params_t,
        memh_p: *mut ucp_mem_h,
    ) -> ucs_status_t;
    pub fn ucp_mem_unmap(context: ucp_context_h, memh: ucp_mem_h) -> ucs_status_t;
    pub fn ucp_mem_query(memh: ucp_mem_h, attr: *mut ucp_mem_attr_t) -> ucs_status_t;
    pub fn ucp_rkey_pack(
        context: ucp_context_h,
        memh: ucp_mem_h,
        rkey_buffer_p: *mut *mut c_void,
        size_p: *mut usize,
    ) -> ucs_status_t;
    pub fn ucp_rkey_buffer_release(rkey_buffer: *mut c_void);
    pub fn ucp_ep_rkey_unpack(
        ep: ucp_ep_h,
        rkey_buffer: *const c_void,
        rkey_p: *mut ucp_rkey_h,
    ) -> ucs_status_t;
    pub fn ucp_rkey_destroy(rkey: ucp_rkey_h);
    pub fn ucp_rkey_ptr(rkey: ucp_rkey_h, raddr: u64, addr_p: *mut *mut c_void) -> ucs_status_t;
    pub fn ucp_put_nbx(
        ep: ucp_ep_h,
        buffer: *const c_void,
        count: usize,
        remote_addr: u64,
        rkey: ucp_rkey_h,
        param: *const ucp_request_param_t,
    ) -> ucs_status_ptr_t;
    pub fn ucp_get_nbx(
        ep: ucp_ep_h,
        buffer: *mut c_void,
        count: usize,
        remote_addr: u64,
        rkey: ucp_rkey_h,
        param: *const ucp_request_param_t,
    ) -> ucs_status_ptr_t;
    pub fn ucp_atomic_op_nbx(
        ep: ucp_ep_h,
        opcode: ucp_atomic_op_t,
        buffer: *const c_void,
        count: usize,
        remote_addr: u64,
        rkey: ucp_rkey_h,
        param: *const ucp_request_param_t,
    ) -> ucs_status_ptr_t;
    pub fn ucp_worker_set_am_recv_handler(
        worker: ucp_worker_h,
        param: *const ucp_am_handler_param_t,
    ) -> ucs_status_t;
    pub fn ucp_am_send_nbx(
        ep: ucp_ep_h,
        id: c_uint,
        header: *const c_void,
        header_length: usize,
        buffer: *const c_void,
        count: usize,
        param: *const ucp_request_param_t,
    ) -> ucs_status_ptr_t;
    pub fn ucp_ep_print_info(ep: ucp_ep_h, stream: *mut FILE);
    pub fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t;
    pub fn ucp_request_free(request: *mut c_void);
    pub fn ucs_status_string(status: ucs_status_t) -> *const c_char;
    pub fn ucp_worker_get_efd(worker: ucp_worker_h, fd: *mut c_int) -> ucs_status_t;
    pub fn ucp_worker_arm(worker: ucp_worker_h) -> ucs_status_t;
    pub fn ucs_global_opts_set_value(name: *const c_char, value: *const c_char) -> ucs_status_t;
    pub fn ucs_log_init();
    pub fn ucs_log_cleanup();
}

// The C library (linked by std on every Linux target).
extern "C" {
    pub fn open_memstream(ptr: *mut *mut c_char, size: *mut usize) -> *mut FILE;
    pub fn fclose(stream: *mut FILE) -> c_int;
    pub fn free(ptr: *mut c_void);
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// Sizes and offsets printed by a C probe compiled against UCX 1.13.1's `ucp.h`.
    #[test]
    fn layouts_match_ucx_1_13_1() {
        assert_eq!(size_of::<ucp_params_t>(), 80);
        assert_eq!(offset_of!(ucp_params_t, features), 8);
        assert_eq!(offset_of!(ucp_params_t, name), 72);
        assert_eq!(size_of::<ucp_worker_params_t>(), 200);
        assert_eq!(offset_of!(ucp_worker_params_t, thread_mode), 8);
        assert_eq!(size_of::<ucp_ep_params_t>(), 104);
        assert_eq!(offset_of!(ucp_ep_params_t, address), 8);
        assert_eq!(offset_of!(ucp_ep_params_t, err_mode), 16);
        assert_eq!(offset_of!(ucp_ep_params_t, err_handler_cb), 24);
        assert_eq!(offset_of!(ucp_ep_params_t, err_handler_arg), 32);
        assert_eq!(size_of::<ucp_am_handler_param_t>(), 32);
        assert_eq!(offset_of!(ucp_am_handler_param_t, id), 8);
        assert_eq!(offset_of!(ucp_am_handler_param_t, flags), 12);
        assert_eq!(offset_of!(ucp_am_handler_param_t, cb), 16);
        assert_eq!(offset_of!(ucp_am_handler_param_t, arg), 24);
        assert_eq!(size_of::<ucp_am_recv_param_t>(), 16);
        assert_eq!(offset_of!(ucp_am_recv_param_t, reply_ep), 8);
        assert_eq!(size_of::<ucp_mem_map_params_t>(), 40);
        assert_eq!(offset_of!(ucp_mem_map_params_t, length), 16);
        assert_eq!(offset_of!(ucp_mem_map_params_t, flags), 24);
        assert_eq!(size_of::<ucp_mem_attr_t>(), 32);
        assert_eq!(offset_of!(ucp_mem_attr_t, address), 8);
        assert_eq!(offset_of!(ucp_mem_attr_t, length), 16);
        assert_eq!(size_of::<ucp_request_param_t>(), 72);
        assert_eq!(offset_of!(ucp_request_param_t, flags), 4);
        assert_eq!(offset_of!(ucp_request_param_t, request), 8);
        assert_eq!(offset_of!(ucp_request_param_t, cb), 16);
        assert_eq!(offset_of!(ucp_request_param_t, datatype), 24);
        assert_eq!(offset_of!(ucp_request_param_t, user_data), 32);
        assert_eq!(offset_of!(ucp_request_param_t, reply_buffer), 40);
        assert_eq!(offset_of!(ucp_request_param_t, memory_type), 48);
    }
}
