//! This process's TCP sockets, found through its descriptors: for a guard over sockets that a
//! library (UCX) opened and owns. The guard reads them, and may shut one down or set an option
//! on it, but never closes one: the descriptor stays UCX's, which sees the connection end and
//! closes it itself.
//!
//! A descriptor number can be closed by its owner and reused for another socket at any moment,
//! so nothing is done to a number: [`Held::take`] duplicates the descriptor and checks that the
//! duplicate is the very socket that was looked at (its inode), and acts on the duplicate.

use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Linux's state number of a listening TCP socket (`TCP_LISTEN`, `include/net/tcp_states.h`).
const TCP_LISTEN: u8 = 10;

/// The open descriptors of this process, listed from `/proc/self/fd`, which stays open so that
/// listing needs no new descriptor (the guard must work when descriptors are short).
pub struct Descriptors {
    dir: *mut libc::DIR,
}

// SAFETY: the directory stream is used only through `&mut self`, by one thread at a time; it
// refers to no thread-local state.
unsafe impl Send for Descriptors {}

impl Descriptors {
    pub fn open() -> io::Result<Descriptors> {
        let path: &CStr = c"/proc/self/fd";
        // SAFETY: the path is NUL-terminated; a null result is an error, checked.
        let dir = unsafe { libc::opendir(path.as_ptr()) };
        if dir.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Descriptors { dir })
    }

    /// Every descriptor open now (including the listing's own).
    pub fn list(&mut self) -> Vec<RawFd> {
        let mut fds = Vec::new();
        // SAFETY: `dir` is a live stream from opendir; rewinding makes the next reads list the
        // descriptor table afresh.
        unsafe { libc::rewinddir(self.dir) };
        loop {
            // SAFETY: `dir` is live; readdir returns null at the end (or on an error, which
            // ends the listing as well).
            let entry = unsafe { libc::readdir(self.dir) };
            if entry.is_null() {
                return fds;
            }
            // SAFETY: a non-null entry points to a dirent whose d_name is NUL-terminated, valid
            // until the next readdir.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
            if let Some(fd) = name.to_str().ok().and_then(|n| n.parse::<RawFd>().ok()) {
                fds.push(fd);
            }
        }
    }

    /// How many descriptors are open (including the listing's own).
    pub fn count(&mut self) -> usize {
        self.list().len()
    }
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: `dir` came from opendir and is closed once.
        unsafe { libc::closedir(self.dir) };
    }
}

/// A TCP socket, as it was when looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpSocket {
    pub fd: RawFd,
    /// Which socket it is: the number of a descriptor may be reused, the inode may not while
    /// the socket lives.
    pub inode: u64,
    pub local: SocketAddr,
    /// The other end (`None` for a listening socket, or a connection that already ended).
    pub peer: Option<SocketAddr>,
    pub listening: bool,
    /// Bytes received so far (`None` where the kernel does not count them).
    pub bytes_received: Option<u64>,
}

/// The address a socket is bound to, if `fd` is an IPv4 or IPv6 socket.
pub fn local_addr(fd: RawFd) -> Option<SocketAddr> {
    let mut storage: libc::sockaddr_storage = zeroed_storage();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage is writable for `len` bytes; a descriptor that is not a socket only
    // makes the call fail.
    let r = unsafe { libc::getsockname(fd, std::ptr::addr_of_mut!(storage).cast(), &mut len) };
    (r == 0).then(|| socket_addr(&storage)).flatten()
}

/// The peer of a connected socket.
fn peer_addr(fd: RawFd) -> Option<SocketAddr> {
    let mut storage: libc::sockaddr_storage = zeroed_storage();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: storage is writable for `len` bytes.
    let r = unsafe { libc::getpeername(fd, std::ptr::addr_of_mut!(storage).cast(), &mut len) };
    (r == 0).then(|| socket_addr(&storage)).flatten()
}

/// The inode of whatever `fd` refers to.
fn inode(fd: RawFd) -> Option<u64> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is writable; a closed descriptor only makes the call fail.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

/// What `fd` is, if it is a TCP socket of IPv4 or IPv6.
pub fn tcp_socket(fd: RawFd) -> Option<TcpSocket> {
    tcp_socket_at(fd, local_addr(fd)?)
}

/// [`tcp_socket`] for a descriptor whose local address the caller already has.
pub fn tcp_socket_at(fd: RawFd, local: SocketAddr) -> Option<TcpSocket> {
    let info = tcp_info(fd)?;
    let listening = info.state == TCP_LISTEN;
    Some(TcpSocket {
        fd,
        inode: inode(fd)?,
        local,
        peer: if listening { None } else { peer_addr(fd) },
        listening,
        bytes_received: info.bytes_received,
    })
}

/// What this guard reads of the kernel's `TCP_INFO`.
struct Info {
    state: u8,
    bytes_received: Option<u64>,
}

/// `TCP_INFO` of `fd`; `None` if it is not a TCP socket.
fn tcp_info(fd: RawFd) -> Option<Info> {
    // SAFETY: an all-zero tcp_info is a valid value to be overwritten.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: info is writable for `len` bytes; the kernel writes at most that many and says
    // how many in `len`. A socket of another protocol makes the call fail.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::addr_of_mut!(info).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    // Kernels before 4.1 do not count received bytes: their tcp_info ends before the field.
    let counted = std::mem::offset_of!(libc::tcp_info, tcpi_bytes_received) + 8;
    let bytes_received = (len as usize >= counted).then_some(info.tcpi_bytes_received);
    Some(Info { state: info.tcpi_state, bytes_received })
}

/// A duplicate of a descriptor that is known to be a given socket: what the guard acts on, so
/// that it never acts on a descriptor number its owner has meanwhile reused. Closing the
/// duplicate (on drop) leaves the owner's descriptor as it was.
pub struct Held(OwnedFd);

impl Held {
    /// `fd`, if it is still the socket `inode`; `None` if it was closed, is another socket
    /// now, or no descriptor is left for the duplicate.
    pub fn take(fd: RawFd, inode: u64) -> Option<Held> {
        // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor for whatever `fd` refers to now (or
        // fails); the new one is ours alone.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return None;
        }
        // SAFETY: `dup` was just made and nothing else owns it.
        let held = Held(unsafe { OwnedFd::from_raw_fd(dup) });
        (self::inode(dup) == Some(inode)).then_some(held)
    }

    /// Ends the connection both ways: the peer sees it closed, and the owner of the socket sees
    /// the end of its stream and closes its descriptor itself.
    pub fn shutdown(&self) -> io::Result<()> {
        // SAFETY: the descriptor is ours and open.
        match unsafe { libc::shutdown(self.0.as_raw_fd(), libc::SHUT_RDWR) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

impl AsRawFd for Held {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: an all-zero sockaddr_storage is a valid (AF_UNSPEC) value.
    unsafe { std::mem::zeroed() }
}

/// The address in `storage`, if it is IPv4 or IPv6.
fn socket_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large and
            // aligned enough for.
            let v4 =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(v4.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let v6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(v6.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// A listener and a connection are found among the descriptors with their addresses, the
    /// bytes received are counted, and shutting down a held duplicate ends the connection for
    /// its peer while the owner's descriptor stays open.
    #[test]
    fn sockets_are_found_and_shut_down_through_a_duplicate() {
        let mut fds = Descriptors::open().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        client.write_all(b"hello").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let listed = fds.list();
        assert!(listed.contains(&accepted.as_raw_fd()) && listed.contains(&listener.as_raw_fd()));
        let l = tcp_socket(listener.as_raw_fd()).unwrap();
        assert!(l.listening && l.peer.is_none() && l.local == addr);
        let a = tcp_socket(accepted.as_raw_fd()).unwrap();
        assert!(!a.listening && a.local == addr);
        assert_eq!(a.peer, Some(client.local_addr().unwrap()));
        assert_eq!(a.bytes_received, Some(5));
        assert!(Held::take(accepted.as_raw_fd(), a.inode + 1).is_none(), "another socket");
        let held = Held::take(accepted.as_raw_fd(), a.inode).unwrap();
        held.shutdown().unwrap();
        drop(held);
        let mut b = [0u8; 8];
        assert_eq!(client.read(&mut b).unwrap(), 0, "the peer sees the connection end");
        assert!(tcp_socket(accepted.as_raw_fd()).is_some(), "the owner's descriptor is open");
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(tcp_socket(file.as_raw_fd()).is_none(), "a file is no socket");
        assert!(fds.list().contains(&file.as_raw_fd()), "listing again sees new descriptors");
    }
}
