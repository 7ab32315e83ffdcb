//! Test hosts on this machine, for tests that cross a network: Linux network namespaces, one
//! per host, each joined by a veth link to a bridge in a namespace of its own (the switch). A
//! host's link can be cut (a partition: its packets are dropped, nothing is reset) and healed.
//! Everything is made by [`Net::create`] and removed when the `Net` is dropped; it needs root
//! and iproute2. Processes run on a host through [`Net::command`] (`ip netns exec`).

use std::io;
use std::process::{Command, Stdio};

/// The hosts and their switch.
pub struct Net {
    tag: String,
    hosts: Vec<String>,
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl Net {
    /// Whether this process may make namespaces (root, with `ip`).
    pub fn available() -> bool {
        let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
        root && Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success())
    }

    /// Hosts named `hosts` on one subnet: host `i` is `10.77.0.(i + 1)` on its `eth0`.
    pub fn create(hosts: &[&str]) -> io::Result<Net> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("dmx{}n{n}", std::process::id());
        let net = Net { tag, hosts: hosts.iter().map(|h| h.to_string()).collect() };
        // On an error, `net` is dropped here and removes what was made.
        net.build()?;
        Ok(net)
    }

    fn build(&self) -> io::Result<()> {
        let sw = self.switch();
        ip(&["netns", "add", &sw])?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for (i, h) in self.hosts.iter().enumerate() {
            let ns = self.ns(h);
            ip(&["netns", "add", &ns])?;
            let port = format!("v{i}");
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", Self::addr(i)), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    /// The namespace of host `h`.
    pub fn ns(&self, h: &str) -> String {
        format!("{}-{h}", self.tag)
    }

    /// The address of host number `i`.
    pub fn addr(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    fn port(&self, h: &str) -> String {
        format!("v{}", self.hosts.iter().position(|x| x == h).expect("a host of this net"))
    }

    /// Cuts host `h` off: its link to the switch drops every packet.
    pub fn cut(&self, h: &str) -> io::Result<()> {
        ip(&["-n", &self.switch(), "link", "set", &self.port(h), "down"])
    }

    /// Joins host `h` again.
    pub fn heal(&self, h: &str) -> io::Result<()> {
        ip(&["-n", &self.switch(), "link", "set", &self.port(h), "up"])
    }

    /// Runs `args` (a command and its arguments) on host `h`; its standard output.
    pub fn run(&self, h: &str, args: &[&str]) -> io::Result<String> {
        let out = Command::new("ip").args(["netns", "exec", &self.ns(h)]).args(args).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A command that runs test `test` of this test binary, alone, on host `h` (the child picks
    /// its part from its environment).
    pub fn this_test(&self, h: &str, test: &str) -> io::Result<Command> {
        let mut c = self.command(h, &std::env::current_exe()?);
        c.args(["--exact", test, "--nocapture", "--test-threads=1"]);
        Ok(c)
    }

    /// A command that runs `program` on host `h`.
    pub fn command(&self, h: &str, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(h)]).arg(program);
        c
    }
}

/// What a child prints after the mark `DMX `, line by line (the test harness prints other
/// lines, and the start of its own on the first one).
pub fn marked_lines(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(at) = line.find("DMX ") {
                if tx.send(line[at + 4..].to_string()).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

impl Drop for Net {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &self.ns(h)]);
        }
        let _ = ip(&["netns", "del", &self.switch()]);
    }
}
