//! Linux SRv6 peers as QEMU guests running Debian's own kernel (`tests/linux-peer/prepare`
//! builds the kernel image and initramfs): the interop tests then need SRv6 in that kernel, not
//! in the host's, which many VM and container kernels build without
//! (`CONFIG_IPV6_SEG6_LWTUNNEL`).
//!
//! A guest mounts the host's root read-only over 9p, so it runs the host's own `ip`, `ping`,
//! `ethtool` and `sysctl`. Its NIC is a tap in the lab's underlay namespace, named like the
//! node's bridge port, so captures on the underlay see its traffic as they see a namespace's.
//! Commands reach it through an agent on a virtio serial port (`tests/linux-peer/agent`): one
//! shell line in, its output and exit status back. Namespaces made inside a guest are
//! registered here by name, and the harness's `ipn`, `nsx`, `sysctl` and `ping` run their
//! commands wherever the namespace lives.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lace_shared::types::MacAddr;

use lace_prereq::{file, program, Need};

use super::{run_capture, wait_for, Proc};

/// How long one command (or the boot, until the first command answers) may take. Guests run
/// under TCG (software emulation: nested KVM is not dependable on the machines this runs on),
/// which boots Debian's kernel in seconds on an idle core and several times that on a loaded one.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// Where `tests/linux-peer/prepare` put the guest's kernel and initramfs.
pub fn peer_dir() -> PathBuf {
    std::env::var_os("LACE_LINUX_PEER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/lace/linux-peer"))
}

/// What booting a Linux peer guest needs: QEMU and the kernel and initramfs that
/// `tests/linux-peer/prepare` (run by `.ci/install-deps`) puts in [`peer_dir`].
pub fn needs() -> Vec<Need> {
    let dir = peer_dir();
    let mut needs = vec![program("qemu-system-x86_64", "qemu-system-x86")];
    for f in ["vmlinuz", "initrd.gz"] {
        needs.push(file(dir.join(f), "run tests/linux-peer/prepare"));
    }
    needs
}

/// Namespaces that live in a guest, by name.
static IN_GUEST: Mutex<Vec<(String, Arc<Guest>)>> = Mutex::new(Vec::new());

/// The guest namespace `ns` lives in, if it lives in one.
pub fn of(ns: &str) -> Option<Arc<Guest>> {
    let list = IN_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    list.iter().find(|(n, _)| n == ns).map(|(_, g)| g.clone())
}

/// Quotes one argument for the guest's shell.
fn quote(arg: &str) -> String {
    assert!(
        !arg.contains('\n'),
        "guest commands are one line: {arg:?} has a newline"
    );
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:=,@%+-".contains(&b));
    if plain {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// `argv` as one line for the guest's shell.
fn command_line(argv: &[&str]) -> String {
    argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

/// One running guest.
#[derive(Debug)]
pub struct Guest {
    /// Its name in messages (`l3`, …).
    pub label: String,
    conn: Mutex<(BufReader<UnixStream>, UnixStream)>,
    qemu: Mutex<Proc>,
}

impl Guest {
    /// Boots a guest whose NIC (`eth0` inside, MAC `mac`) is the tap `tap` in namespace
    /// `netns`; its console and QEMU's messages go to `<dir>/<label>.qemu.log`. Returns once
    /// the agent answers.
    pub fn boot(label: &str, dir: &Path, netns: &str, tap: &str, mac: MacAddr) -> Arc<Guest> {
        let peer = peer_dir();
        let sock = dir.join(format!("{label}.agent"));
        let _ = std::fs::remove_file(&sock);
        let arg = |s: &str| s.to_string();
        let argv: Vec<String> = vec![
            arg("ip"),
            arg("netns"),
            arg("exec"),
            arg(netns),
            arg("qemu-system-x86_64"),
            arg("-nodefaults"),
            arg("-display"),
            arg("none"),
            arg("-no-reboot"),
            arg("-machine"),
            arg("q35,accel=tcg"),
            arg("-cpu"),
            arg("max"),
            arg("-m"),
            arg("256"),
            arg("-smp"),
            arg("1"),
            arg("-kernel"),
            peer.join("vmlinuz").display().to_string(),
            arg("-initrd"),
            peer.join("initrd.gz").display().to_string(),
            arg("-append"),
            arg("console=ttyS0 panic=-1 quiet"),
            arg("-serial"),
            arg("stdio"),
            arg("-virtfs"),
            arg("local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap"),
            arg("-netdev"),
            format!("tap,id=ul,ifname={tap},script=no,downscript=no"),
            arg("-device"),
            format!("virtio-net-pci,netdev=ul,mac={mac}"),
            arg("-device"),
            arg("virtio-serial-pci"),
            arg("-chardev"),
            // wait=on: QEMU starts the guest only once the harness is connected, so the
            // agent's first read never sees a closed port.
            format!("socket,id=agent,path={},server=on,wait=on", sock.display()),
            arg("-device"),
            arg("virtserialport,chardev=agent,name=lace.agent"),
        ];
        let mut qemu = Proc::spawn(
            &format!("qemu {label}"),
            &argv,
            dir.join(format!("{label}.qemu.log")),
        );
        let stream = wait_for(
            &format!("guest {label}'s agent socket"),
            Duration::from_secs(30),
            || {
                if let Some(s) = qemu.try_wait() {
                    panic!(
                        "qemu for guest {label} exited ({s}):\n{}",
                        qemu.log_tail(40)
                    );
                }
                UnixStream::connect(&sock).ok()
            },
        );
        stream
            .set_read_timeout(Some(COMMAND_TIMEOUT))
            .expect("agent socket timeout");
        let reader = BufReader::new(stream.try_clone().expect("dup agent socket"));
        let g = Arc::new(Guest {
            label: label.to_string(),
            conn: Mutex::new((reader, stream)),
            qemu: Mutex::new(qemu),
        });
        g.run(&["true"])
            .unwrap_or_else(|e| panic!("guest {label} did not come up: {e}"));
        g
    }

    /// Runs `argv` in the guest: Ok(output) on exit status 0, Err(description) otherwise.
    pub fn run(&self, argv: &[&str]) -> Result<String, String> {
        let (rc, out) = self.run_status(argv);
        if rc == 0 {
            Ok(out)
        } else {
            Err(format!(
                "`{}` failed in guest {} (exit status {rc}): {out}",
                argv.join(" "),
                self.label
            ))
        }
    }

    /// Runs `argv` in the guest; its exit status and output (stdout and stderr together).
    pub fn run_status(&self, argv: &[&str]) -> (i32, String) {
        self.run_line(&command_line(argv), argv)
    }

    /// Starts `argv` in the guest in the background; `name` (unique in this guest) names the
    /// files that hold its output, process id and exit status there.
    pub fn spawn(self: &Arc<Guest>, name: &str, argv: &[&str]) -> Task {
        let file = |ext: &str| format!("/run/lace-task-{name}.{ext}");
        let (log, pid, rc) = (file("log"), file("pid"), file("rc"));
        // The inner shell records its own pid, then becomes the program; the outer group
        // records the exit status once it ends, renamed into place so that a reader never
        // sees the file created and still empty.
        let mut inner = vec![
            "sh",
            "-c",
            "echo $$ > \"$0\"; shift; exec \"$@\"",
            &pid,
            "-",
        ];
        inner.extend_from_slice(argv);
        let line = format!(
            "{{ {}; echo $? > {rc}.new; mv {rc}.new {rc}; }} > {log} 2>&1 &",
            command_line(&inner)
        );
        let (status, out) = self.run_line(&line, argv);
        assert!(
            status == 0,
            "starting `{}` in guest {}: exit status {status}: {out}",
            argv.join(" "),
            self.label
        );
        Task {
            guest: self.clone(),
            name: name.to_string(),
            log,
            pid,
            rc,
            status: None,
        }
    }

    /// Writes `contents` to `path` in the guest (under `/run` or `/tmp`: the rest of its file
    /// system is the host's root, read-only). The bytes go as octal escapes of the shell's
    /// `printf`, so any content fits the agent's one-line commands.
    pub fn write_file(&self, path: &str, contents: &[u8]) {
        let format: String = contents.iter().map(|b| format!("\\{b:03o}")).collect();
        let line = format!("printf {} > {}", quote(&format), quote(path));
        let (status, out) = self.run_line(&line, &["printf", "…", ">", path]);
        assert!(
            status == 0,
            "writing {path} in guest {}: exit status {status}: {out}",
            self.label
        );
    }

    /// Sends one command line to the agent; `argv` names the command in failures.
    fn run_line(&self, line: &str, argv: &[&str]) -> (i32, String) {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let (reader, writer) = &mut *conn;
        if let Err(e) = writer.write_all(format!("{line}\n").as_bytes()) {
            panic!(
                "guest {}: sending a command: {e}\n{}",
                self.label,
                self.log()
            );
        }
        let mut out = String::new();
        loop {
            let mut l = String::new();
            match reader.read_line(&mut l) {
                Ok(0) => panic!(
                    "guest {} closed its agent port during `{}`; output so far:\n{out}\n{}",
                    self.label,
                    argv.join(" "),
                    self.log()
                ),
                Ok(_) => {}
                Err(e) => panic!(
                    "guest {}: no answer to `{}` ({e}); output so far:\n{out}\n{}",
                    self.label,
                    argv.join(" "),
                    self.log()
                ),
            }
            if let Some(rc) = l.strip_prefix("@@lace-done ") {
                let rc = rc.trim().parse().expect("agent exit status");
                // The agent ends the output with a newline of its own before the marker.
                if out.ends_with('\n') {
                    out.pop();
                }
                return (rc, out);
            }
            out.push_str(&l);
        }
    }

    /// Makes namespace `ns` in the guest and registers it, so the harness's commands for it
    /// run here.
    pub fn add_netns(self: &Arc<Guest>, ns: &str) {
        self.run(&["ip", "netns", "add", ns])
            .unwrap_or_else(|e| panic!("{e}"));
        let mut list = IN_GUEST.lock().unwrap_or_else(|p| p.into_inner());
        list.push((ns.to_string(), self.clone()));
    }

    /// Forgets the namespaces registered for this guest (before the guest goes).
    pub fn unregister(&self) {
        let mut list = IN_GUEST.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|(_, g)| !std::ptr::eq(&**g, self));
    }

    /// QEMU's log with the guest's console (last 60 lines).
    pub fn log(&self) -> String {
        let q = self.qemu.lock().unwrap_or_else(|p| p.into_inner());
        format!(
            "----- guest {} console and qemu log -----\n{}",
            self.label,
            q.log_tail(60)
        )
    }

    /// Stops QEMU.
    pub fn stop(&self) {
        let mut q = self.qemu.lock().unwrap_or_else(|p| p.into_inner());
        q.stop(libc::SIGTERM, Duration::from_secs(10));
    }
}

/// A program started in a guest's background by [`Guest::spawn`]; killed on drop if still
/// running, its output printed when a test fails.
#[derive(Debug)]
pub struct Task {
    guest: Arc<Guest>,
    name: String,
    log: String,
    pid: String,
    rc: String,
    status: Option<i32>,
}

impl Task {
    /// Its exit status, once it has ended.
    pub fn exit_status(&mut self) -> Option<i32> {
        if self.status.is_none() {
            if let Ok(rc) = self.guest.run(&["cat", &self.rc]) {
                self.status = Some(rc.trim().parse().unwrap_or_else(|e| {
                    panic!("guest task {}: exit status {rc:?}: {e}", self.name)
                }));
            }
        }
        self.status
    }

    /// Its output so far.
    pub fn log_text(&self) -> String {
        self.guest.run(&["cat", &self.log]).unwrap_or_default()
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if self.exit_status().is_none() {
            let kill = format!("kill -KILL $(cat {})", self.pid);
            let _ = self.guest.run(&["sh", "-c", &kill]);
        }
        if std::thread::panicking() {
            eprintln!(
                "----- guest {} task {} ({:?}) output -----\n{}\n----- end {} -----",
                self.guest.label,
                self.name,
                self.status,
                self.log_text(),
                self.name
            );
        }
        // Its files go with the guest's /run.
    }
}

/// Runs `argv` for namespace `ns`: on this host, or in the guest `ns` lives in.
pub fn in_ns(ns: &str, argv: &[&str]) -> Result<String, String> {
    match of(ns) {
        Some(g) => g.run(argv),
        None => run_capture(argv),
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn arguments_are_quoted_for_the_guest_shell_only_when_needed() {
        assert_eq!(quote("fd00:100::3/64"), "fd00:100::3/64");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("$(reboot)"), "'$(reboot)'");
    }
}
