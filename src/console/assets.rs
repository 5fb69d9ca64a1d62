//! The console's files, inside the binary (the machines that run it may reach nothing): one
//! page, its script (ES modules, `console/js/`) and style sheet, and the charting library uPlot, vendored from npm at a
//! pinned version (`console/vendor/README.md`). A dozen files need no crate: `include_bytes!`
//! and a table. No templates either: the page is static and its script fills it from the JSON
//! endpoints, writing every value as text (`textContent`), never as markup, so a tenant id or
//! `data` that holds HTML is shown, not run; the Content-Security-Policy forbids inline script
//! besides.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// What the browser may load and run on a console page: only the daemon's own files, no
/// inline script or style, no frames, no plugins, and no form sent anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const JS: &str = "text/javascript; charset=utf-8";

/// `(name under /console/assets/, content type, bytes)`. The page loads `main.js`, which
/// imports the other modules.
const FILES: &[(&str, &str, &[u8])] = &[
    ("main.js", JS, include_bytes!("../../console/js/main.js")),
    ("state.js", JS, include_bytes!("../../console/js/state.js")),
    ("dom.js", JS, include_bytes!("../../console/js/dom.js")),
    (
        "request.js",
        JS,
        include_bytes!("../../console/js/request.js"),
    ),
    (
        "charts.js",
        JS,
        include_bytes!("../../console/js/charts.js"),
    ),
    (
        "overview.js",
        JS,
        include_bytes!("../../console/js/overview.js"),
    ),
    (
        "tenant.js",
        JS,
        include_bytes!("../../console/js/tenant.js"),
    ),
    ("timer.js", JS, include_bytes!("../../console/js/timer.js")),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../../console/console.css"),
    ),
    (
        "uPlot.iife.min.js",
        JS,
        include_bytes!("../../console/vendor/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../console/vendor/uPlot.min.css"),
    ),
];

const PAGE: &[u8] = include_bytes!("../../console/index.html");

/// The console's one page.
pub fn page() -> Response {
    file("text/html; charset=utf-8", PAGE)
}

/// A file under `/console/assets/`, or 404.
pub fn asset(name: &str) -> Response {
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, kind, bytes)) => file(kind, bytes),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

fn file(kind: &'static str, bytes: &'static [u8]) -> Response {
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // Revalidated each time: a new release's files are picked up by the next load.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files_and_has_no_inline_script() {
        let page = std::str::from_utf8(PAGE).unwrap();
        // Each file is loaded by the page, or imported by a module.
        for (name, _, _) in FILES {
            let imported = FILES.iter().any(|(_, _, bytes)| {
                std::str::from_utf8(bytes).is_ok_and(|text| text.contains(&format!("\"./{name}\"")))
            });
            assert!(
                page.contains(&format!("/console/assets/{name}")) || imported,
                "{name}"
            );
        }
        // Every <script> has a src; none carries code, nor any on* attribute.
        for part in page.split("<script").skip(1) {
            let tag_end = part.find('>').unwrap();
            assert!(part[..tag_end].contains("src="), "{part}");
            assert!(
                part[tag_end + 1..].trim_start().starts_with("</script>"),
                "{part}"
            );
        }
        let handler = page.match_indices(" on").any(|(i, _)| {
            let rest = &page[i + 3..];
            let letters = rest.chars().take_while(char::is_ascii_alphabetic).count();
            letters > 0 && rest[letters..].starts_with('=')
        });
        assert!(!handler, "an inline event handler");
        assert!(!page.contains("style="), "an inline style");
    }

    #[test]
    fn an_unknown_file_is_not_found() {
        assert_eq!(asset("../Cargo.toml").status(), StatusCode::NOT_FOUND);
        assert_eq!(asset("main.js").status(), StatusCode::OK);
    }
}
