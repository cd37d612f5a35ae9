//! A published port in podman's own form, `[ADDRESS:]HOST-PORT:CONTAINER-PORT[/PROTOCOL]`
//! (`127.0.0.1:8080:80/tcp`, `8080:80`, `[::1]:8443:443`), parsed, shown again, and compared
//! with another for a host port both would take.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

/// A port a container publishes: a host address and port, to a port of the container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PortMapping {
    /// The host address it listens on; absent: every address of the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// The port on the host.
    pub host_port: u16,
    /// The port inside the container.
    pub port: u16,
    /// The protocol.
    #[serde(default, skip_serializing_if = "Protocol::is_tcp")]
    pub protocol: Protocol,
}

/// A port's protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// TCP (the default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    fn is_tcp(&self) -> bool {
        *self == Protocol::Tcp
    }

    /// Its name as podman and `/proc/net` name it (`tcp`, `udp`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

impl PortMapping {
    /// Reads podman's form: `[ADDRESS:]HOST-PORT:CONTAINER-PORT[/tcp|/udp]`, an IPv6 address in
    /// brackets.
    ///
    /// # Errors
    /// What is wrong with the text, as a sentence.
    pub fn parse(text: &str) -> Result<PortMapping, String> {
        let form = "a port is `[ADDRESS:]HOST-PORT:CONTAINER-PORT[/tcp|/udp]`";
        let (mapping, protocol) = match text.rsplit_once('/') {
            Some((mapping, "tcp")) => (mapping, Protocol::Tcp),
            Some((mapping, "udp")) => (mapping, Protocol::Udp),
            Some((_, other)) => {
                return Err(format!(
                    "`{text}`: `{other}` is not a protocol (tcp or udp)"
                ))
            }
            None => (text, Protocol::Tcp),
        };
        let (address, ports) = if let Some(rest) = mapping.strip_prefix('[') {
            let (address, ports) = rest
                .split_once("]:")
                .ok_or_else(|| format!("`{text}`: {form}"))?;
            (Some(address), ports)
        } else {
            match mapping.split(':').collect::<Vec<_>>().as_slice() {
                [_, _] => (None, mapping),
                [address, _, _] => (Some(*address), &mapping[address.len() + 1..]),
                _ => return Err(format!("`{text}`: {form}")),
            }
        };
        let address = match address {
            None => None,
            Some(address) => Some(
                address
                    .parse::<IpAddr>()
                    .map_err(|_| format!("`{text}`: `{address}` is not an IP address"))?,
            ),
        };
        let (host, inside) = ports
            .split_once(':')
            .ok_or_else(|| format!("`{text}`: {form}"))?;
        let number = |p: &str| match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(format!("`{text}`: `{p}` is not a port (1 to 65535)")),
        };
        Ok(PortMapping {
            address,
            host_port: number(host)?,
            port: number(inside)?,
            protocol,
        })
    }

    /// The host side alone: `127.0.0.1:8080/tcp`, `*:8080/tcp` for every address.
    pub fn host_side(&self) -> String {
        let port = self.host_port;
        let protocol = self.protocol.name();
        match self.address {
            None => format!("*:{port}/{protocol}"),
            Some(IpAddr::V6(address)) => format!("[{address}]:{port}/{protocol}"),
            Some(address) => format!("{address}:{port}/{protocol}"),
        }
    }

    /// Whether `other` would take a host port this one takes: the same port and protocol, on
    /// the same address or where either listens on every address (or its family's
    /// unspecified address).
    pub fn collides_with(&self, other: &PortMapping) -> bool {
        let everywhere = |a: &Option<IpAddr>| a.is_none_or(|a| a.is_unspecified());
        self.host_port == other.host_port
            && self.protocol == other.protocol
            && (everywhere(&self.address)
                || everywhere(&other.address)
                || self.address == other.address)
    }
}

impl fmt::Display for PortMapping {
    /// Podman's form again (`127.0.0.1:8080:80/tcp`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.address {
            None => {}
            Some(IpAddr::V6(address)) => write!(f, "[{address}]:")?,
            Some(address) => write!(f, "{address}:")?,
        }
        write!(
            f,
            "{}:{}/{}",
            self.host_port,
            self.port,
            self.protocol.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_forms_read_and_show_again() {
        for (text, shown) in [
            ("127.0.0.1:8080:80/tcp", "127.0.0.1:8080:80/tcp"),
            ("8080:80", "8080:80/tcp"),
            ("0.0.0.0:53:53/udp", "0.0.0.0:53:53/udp"),
            ("[::1]:8443:443", "[::1]:8443:443/tcp"),
        ] {
            let port = PortMapping::parse(text).unwrap();
            assert_eq!(port.to_string(), shown);
            assert_eq!(PortMapping::parse(shown).unwrap(), port);
        }
    }

    #[test]
    fn what_is_not_a_port_is_said() {
        for (text, says) in [
            ("80", "a port is"),
            ("1.2.3:80:80", "not an IP address"),
            ("8080:0", "`0` is not a port"),
            ("8080:70000", "`70000` is not a port"),
            ("8080:80/sctp", "`sctp` is not a protocol"),
            ("a:b:c:d", "a port is"),
            ("+80:80", "`+80` is not a port"),
        ] {
            let error = PortMapping::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn ports_collide_on_one_address_or_where_either_takes_every_address() {
        let p = |text: &str| PortMapping::parse(text).unwrap();
        assert!(p("127.0.0.1:8080:80").collides_with(&p("127.0.0.1:8080:81")));
        assert!(p("8080:80").collides_with(&p("127.0.0.1:8080:80")));
        assert!(p("0.0.0.0:8080:80").collides_with(&p("10.0.0.1:8080:80")));
        assert!(!p("127.0.0.1:8080:80").collides_with(&p("127.0.0.2:8080:80")));
        assert!(!p("8080:80/tcp").collides_with(&p("8080:80/udp")));
        assert!(!p("8080:80").collides_with(&p("8081:80")));
    }
}
