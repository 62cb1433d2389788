//! Loopback ports for child processes, picked below the kernel's ephemeral range.
//!
//! A port taken from `bind("127.0.0.1:0")` and released lies in the ephemeral range, where
//! any outgoing connection of any concurrent test may take it before the child binds it (CI
//! once saw `binding the admin port …: Address already in use`). Ports below that range are
//! never given to outgoing connections nor to `:0` binds; a counter keeps this process's picks
//! apart and a start derived from the pid keeps concurrent test processes apart.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out.
const FLOOR: u32 = 10_000;

/// A loopback port that nothing listened on a moment ago and that no outgoing connection or
/// `:0` bind will take meanwhile.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ceiling = ephemeral_floor();
    if ceiling <= FLOOR + 1_000 {
        return kernel_port();
    }
    let span = ceiling - FLOOR;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FLOOR + (start + n) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    kernel_port()
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_floor() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port the kernel picks (the fallback when the range below the ephemeral ports is small).
fn kernel_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
