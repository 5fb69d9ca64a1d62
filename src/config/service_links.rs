//! Kubernetes service links: the variables the kubelet puts in a pod for every Service of its
//! namespace (`<SERVICE>_SERVICE_HOST=10.96.0.12`, `<SERVICE>_PORT=tcp://10.96.0.12:9464`, …).
//! A Service named `timer` or `timer-…` gives names under our prefix. Those that name no
//! setting are ignored without a warning; they are recognised by name *and* value, exactly as
//! the kubelet writes them, so that a mistyped setting (`TIMER_HTTP_PORT=9464`) is still
//! reported. `enableServiceLinks: false` in the pod spec keeps them out in the first place.

use std::net::{IpAddr, SocketAddr};

/// Whether `name=value` is one of the variables the kubelet sets for a Service: for a Service
/// `S` (upper case, `-` as `_`) with cluster IP `A` and ports `P` (protocol `T`, name `N`):
/// `S_SERVICE_HOST=A`, `S_SERVICE_PORT=P`, `S_SERVICE_PORT_N=P`, `S_PORT=t://A:P`,
/// `S_PORT_P_T=t://A:P`, `S_PORT_P_T_PROTO=t`, `S_PORT_P_T_PORT=P`, `S_PORT_P_T_ADDR=A`.
pub(super) fn is_service_link(name: &str, value: &str) -> bool {
    let tokens: Vec<&str> = name.split('_').collect();
    service_host(&tokens, value)
        || service_port(&tokens, value)
        || first_port(&tokens, value)
        || port_variable(&tokens, value)
}

/// `S_SERVICE_HOST=<cluster IP>`.
fn service_host(tokens: &[&str], value: &str) -> bool {
    matches!(tokens, [service @ .., "SERVICE", "HOST"] if named(service)) && is_ip(value)
}

/// `S_SERVICE_PORT=<port>` and, for a named port, `S_SERVICE_PORT_<NAME>=<port>`.
fn service_port(tokens: &[&str], value: &str) -> bool {
    let at = tokens
        .windows(2)
        .enumerate()
        .skip(1)
        .find(|(_, pair)| *pair == ["SERVICE", "PORT"])
        .map(|(at, _)| at);
    match at {
        Some(at) => {
            let port_name = &tokens[at + 2..];
            named(&tokens[..at]) && port_name.iter().all(|t| is_name_token(t)) && is_port(value)
        }
        None => false,
    }
}

/// `S_PORT=<protocol>://<cluster IP>:<port>`, for the Service's first port.
fn first_port(tokens: &[&str], value: &str) -> bool {
    matches!(tokens, [service @ .., "PORT"] if named(service)) && is_address(value, None, None)
}

/// `S_PORT_<port>_<PROTOCOL>` and its `_PROTO`, `_PORT` and `_ADDR`.
fn port_variable(tokens: &[&str], value: &str) -> bool {
    match tokens {
        [service @ .., "PORT", port, protocol] if named(service) => {
            is_protocol(protocol) && is_address(value, Some(protocol), Some(port))
        }
        [service @ .., "PORT", port, protocol, field] if named(service) => {
            is_port(port)
                && is_protocol(protocol)
                && match *field {
                    "PROTO" => value == protocol.to_ascii_lowercase(),
                    "PORT" => value == *port,
                    "ADDR" => is_ip(value),
                    _ => false,
                }
        }
        _ => false,
    }
}

/// A Service's name, as the kubelet writes it: upper case, `-` as `_`.
fn named(service: &[&str]) -> bool {
    !service.is_empty() && service.iter().all(|t| is_name_token(t))
}

fn is_name_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

fn is_protocol(token: &str) -> bool {
    matches!(token, "TCP" | "UDP" | "SCTP")
}

fn is_ip(value: &str) -> bool {
    value.parse::<IpAddr>().is_ok()
}

/// A port as the kubelet writes one: a decimal number 1–65535, nothing around it.
fn is_port(value: &str) -> bool {
    value
        .parse::<u16>()
        .is_ok_and(|port| port != 0 && port.to_string() == value)
}

/// `<protocol>://<IP>:<port>` (IPv6 in brackets), of the given protocol and port when given.
fn is_address(value: &str, protocol: Option<&str>, port: Option<&str>) -> bool {
    let Some((scheme, address)) = value.split_once("://") else {
        return false;
    };
    let scheme_ok = match protocol {
        Some(protocol) => scheme == protocol.to_ascii_lowercase(),
        None => matches!(scheme, "tcp" | "udp" | "sctp"),
    };
    let Ok(address) = address.parse::<SocketAddr>() else {
        return false;
    };
    let port_ok = match port {
        Some(port) => is_port(port) && address.port().to_string() == port,
        None => address.port() != 0,
    };
    scheme_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::is_service_link;

    #[test]
    fn every_variable_the_kubelet_writes_is_recognised() {
        for (name, value) in [
            ("TIMER_SERVICE_HOST", "10.96.0.12"),
            ("TIMER_SERVICE_PORT", "9464"),
            ("TIMER_SERVICE_PORT_HTTP", "9464"),
            ("TIMER_SERVICE_PORT_HTTP_METRICS", "9464"),
            ("TIMER_PORT", "tcp://10.96.0.12:9464"),
            ("TIMER_PORT_9464_TCP", "tcp://10.96.0.12:9464"),
            ("TIMER_PORT_9464_TCP_PROTO", "tcp"),
            ("TIMER_PORT_9464_TCP_PORT", "9464"),
            ("TIMER_PORT_9464_TCP_ADDR", "10.96.0.12"),
            ("TIMER_NATS_SERVICE_HOST", "fd00::12"),
            ("TIMER_NATS_PORT", "tcp://[fd00::12]:4222"),
            ("TIMER_NATS_PORT_4222_TCP", "tcp://[fd00::12]:4222"),
            ("TIMER_DNS_PORT_53_UDP", "udp://10.96.0.10:53"),
            ("TIMER_DNS_PORT_53_UDP_PROTO", "udp"),
            ("TIMER_SCTP_PORT_9_SCTP_ADDR", "10.96.0.9"),
        ] {
            assert!(is_service_link(name, value), "{name}={value}");
        }
    }

    #[test]
    fn look_alikes_are_not_service_links() {
        for (name, value) in [
            ("TIMER_HTTP_PORT", "9464"),
            ("TIMER_PORT", "9464"),
            ("TIMER_PORT", "http://10.96.0.12:9464"),
            ("TIMER_SERVICE_HOST", "timer.example"),
            ("TIMER_SERVICE_PORT", "09464"),
            ("TIMER_SERVICE_PORT", "0"),
            ("TIMER_SERVICE_PORT", "http"),
            ("TIMER_PORT_9464_TCP", "tcp://10.96.0.12:9465"),
            ("TIMER_PORT_9464_TCP", "udp://10.96.0.12:9464"),
            ("TIMER_PORT_9464_TCP_PROTO", "udp"),
            ("TIMER_PORT_9464_TCP_PORT", "9465"),
            ("TIMER_PORT_9464_TCP_ADDR", "timer"),
            ("TIMER_PORT_9464_HTTP", "tcp://10.96.0.12:9464"),
            ("TIMER_PORT_X_TCP_PORT", "X"),
            ("TIMER_SERVICE_HOSTS", "10.96.0.12"),
            ("TIMER_http_SERVICE_HOST", "10.96.0.12"),
            ("SERVICE_HOST", "10.96.0.12"),
        ] {
            assert!(!is_service_link(name, value), "{name}={value}");
        }
    }
}
