//! With the `ucx` feature, finds OpenUCX with pkg-config and links libucp.

fn main() {
    #[cfg(feature = "ucx")]
    {
        let lib = pkg_config::Config::new().atleast_version("1.13").probe("ucx").unwrap_or_else(|e| {
            panic!("the `ucx` feature needs OpenUCX >= 1.13 (Debian: apt-get install libucx-dev): {e}")
        });
        let _ = lib;
    }
}
