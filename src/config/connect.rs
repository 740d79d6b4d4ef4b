//! The address peers on another network connect to
//! (`peer_advertised_connect`): `host:port`, or the connect URI
//! `http://host:port` (a trailing `/` allowed), kept as `host:port`, the
//! only form an answer is sent to.

use std::net::{Ipv4Addr, Ipv6Addr};

/// `text` as `host:port`, or why it is not an address answers can go to.
///
/// Guarantees: an `Ok` value is `host:port` with a port in 1..=65535 and
/// a host that is a DNS name, an IPv4 address or a bracketed IPv6
/// address; nothing else (no user, path, query or other scheme) passes.
pub(crate) fn normalise(text: &str) -> Result<String, String> {
    let trimmed = text.trim();
    let rest = match trimmed.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!("the scheme {scheme:?} is not http"));
        }
        None => trimmed,
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if let Some(at) = authority.find(['/', '?', '#', '@']) {
        let what = match authority.as_bytes().get(at) {
            Some(b'@') => "a user",
            Some(b'/') => "a path",
            _ => "a query",
        };
        return Err(format!("{what} is not allowed, only host:port"));
    }
    let (host, port) = split(authority)?;
    Ok(format!("{host}:{port}"))
}

/// The host and port of `authority`.
fn split(authority: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let (address, port) = inner
            .split_once(']')
            .ok_or_else(|| "an IPv6 address misses its closing `]`".to_owned())?;
        address
            .parse::<Ipv6Addr>()
            .map_err(|_| format!("{address:?} is not an IPv6 address"))?;
        let port = port
            .strip_prefix(':')
            .ok_or_else(|| "it has no port (host:port)".to_owned())?;
        (&authority[..address.len() + 2], port)
    } else {
        let (host, port) = authority
            .rsplit_once(':')
            .ok_or_else(|| "it has no port (host:port)".to_owned())?;
        check_host(host)?;
        (host, port)
    };
    Ok((host, check_port(port)?))
}

/// A port of 1..=65535, in decimal digits.
fn check_port(port: &str) -> Result<u16, String> {
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("the port {port:?} is not a number"));
    }
    match port.parse::<u16>() {
        Ok(0) => Err("the port is 0; peers need the real one".to_owned()),
        Ok(port) => Ok(port),
        Err(_) => Err(format!("the port {port} is above 65535")),
    }
}

/// A DNS name (labels of letters, digits and `-`, not at a label's ends)
/// or an IPv4 address; an unbracketed IPv6 address is refused.
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("the host is empty".to_owned());
    }
    if host.contains(':') {
        return Err(format!(
            "{host:?} is not a host; write an IPv6 address in brackets, [::1]:9099"
        ));
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return host
            .parse::<Ipv4Addr>()
            .map(|_| ())
            .map_err(|_| format!("{host:?} is not an IPv4 address"));
    }
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!("{host:?} is not a host name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
