//! Who holds a host port: read from `/proc/net/{tcp,tcp6,udp,udp6}` (the sockets bound in the
//! host's network namespace) and `/proc/<pid>/fd` (which process has each socket open), so that
//! a container whose port is taken is failed naming the port and the program that holds it,
//! never as the exit of its own program.

use mesh_model::declaration::{PortMapping, Protocol};
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// TCP's state `LISTEN` in `/proc/net/tcp`.
const TCP_LISTEN: &str = "0A";

/// Who holds the host side of `port`, said as a sentence's end (`` `python3` (pid 812) ``);
/// `None` when no socket of its protocol is bound where it would bind.
pub(super) fn holder(port: &PortMapping) -> Option<String> {
    let tables: [&str; 2] = match port.protocol {
        Protocol::Tcp => ["/proc/net/tcp", "/proc/net/tcp6"],
        Protocol::Udp => ["/proc/net/udp", "/proc/net/udp6"],
    };
    let inode = tables.iter().find_map(|table| {
        let text = fs::read_to_string(table).ok()?;
        text.lines()
            .skip(1)
            .filter_map(bound_socket)
            .find(|socket| {
                (port.protocol == Protocol::Udp || socket.state == TCP_LISTEN)
                    && socket.port == port.host_port
                    && overlaps(port.address, socket.address)
            })
            .map(|socket| socket.inode)
    })?;
    Some(
        process_of(inode)
            .map(|(pid, program)| format!("`{program}` (pid {pid})"))
            .unwrap_or_else(|| format!("a process this host cannot see (socket inode {inode})")),
    )
}

/// One line of a `/proc/net` table, as far as a holder needs it.
struct BoundSocket<'l> {
    address: IpAddr,
    port: u16,
    state: &'l str,
    inode: u64,
}

/// Reads `sl local_address rem_address st … uid timeout inode`.
fn bound_socket(line: &str) -> Option<BoundSocket<'_>> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (address, port) = fields.get(1)?.split_once(':')?;
    Some(BoundSocket {
        address: address_of(address)?,
        port: u16::from_str_radix(port, 16).ok()?,
        state: fields.get(3)?,
        inode: fields.get(9)?.parse().ok()?,
    })
}

/// An address as the kernel prints it: each 32-bit word in hex, in the machine's byte order.
fn address_of(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| -> Option<[u8; 4]> {
        let text = hex.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(text, 16).ok()?.to_ne_bytes())
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            let v6 = Ipv6Addr::from(bytes);
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

/// Whether a port wanted on `wanted` (every address when `None`) and a socket bound on `bound`
/// take the same place: either is unspecified, or they are the same address.
fn overlaps(wanted: Option<IpAddr>, bound: IpAddr) -> bool {
    bound.is_unspecified() || wanted.is_none_or(|wanted| wanted.is_unspecified() || wanted == bound)
}

/// The process that has socket `inode` open, and its program's name.
fn process_of(inode: u64) -> Option<(u32, String)> {
    let socket = format!("socket:[{inode}]");
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let holds = fs::read_dir(entry.path().join("fd"))
            .ok()?
            .flatten()
            .any(|fd| {
                fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == socket.as_str())
            });
        if !holds {
            return None;
        }
        let program = fs::read_to_string(entry.path().join("comm"))
            .map(|comm| comm.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned());
        Some((pid, program))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_this_process_listens_on_is_held_by_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let wanted = PortMapping::parse(&format!("127.0.0.1:{port}:80")).unwrap();
        let said = holder(&wanted).expect("the port is held");
        assert!(
            said.contains(&format!("(pid {})", std::process::id())),
            "{said}"
        );
        let elsewhere = PortMapping::parse(&format!("127.0.0.2:{port}:80")).unwrap();
        assert_eq!(holder(&elsewhere), None);
        drop(listener);
        assert_eq!(holder(&wanted), None);
    }

    #[test]
    fn the_kernels_addresses_read_as_addresses() {
        let loopback = u32::from_ne_bytes([127, 0, 0, 1]);
        assert_eq!(
            address_of(&format!("{loopback:08X}")),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            address_of(&"0".repeat(32)),
            Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED))
        );
    }
}
