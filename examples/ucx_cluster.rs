//! The ordered-index example's workload ([`ordered_local::demo`]) on memnodes over OpenUCX:
//! the index code is the same, only the fabric differs. Needs a build with `--features ucx`
//! (libucx-dev) and running memnodes, e.g. on this machine:
//!
//!     head -c 32 /dev/urandom | base64 > token
//!     cargo run --release --features ucx -- memnode --listen 127.0.0.1:7000 --size 1g \
//!         --token-file token &
//!     cargo run --release --features ucx --example ucx_cluster -- 127.0.0.1:7000 token
//!
//! Arguments: the memnodes' `HOST:PORT`s, comma-separated in id order (as `dmindex bench
//! --transport ucx --memnode` takes them), then the file holding their token. The index goes
//! into root slot 0: a second run against the same memnodes fails until they are restarted.

#[path = "ordered_local.rs"]
#[allow(dead_code)] // its `main`: this example has its own
mod ordered_local;

use dmindex_ucx::proto::read_token_file;
use dmindex_ucx::transport::{UcxFabric, UcxOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [memnodes, token_file] = &args[..] else {
        return Err("usage: ucx_cluster HOST:PORT[,HOST:PORT...] TOKEN_FILE".into());
    };
    let addrs: Vec<String> = memnodes.split(',').map(str::to_string).collect();
    let token = read_token_file(token_file.as_ref())?;

    // One connection per memnode; clients made from the fabric share it.
    let fabric = UcxFabric::connect_with(&addrs, &token, &UcxOptions::default())?;
    ordered_local::demo(&fabric)
}
