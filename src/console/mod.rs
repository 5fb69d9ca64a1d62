//! The web console at `/console` on the `[http]` listener (docs/CONTRACT.md §7): each tenant's
//! pending timers, their forecast and their list, one timer's detail, and two actions (cancel
//! one, cancel many by the current filter after a dry run). Off unless `[console]` sets a token.
//!
//! - `GET /console` is the page, `GET /console/assets/<file>` its files (`assets`): public,
//!   since they hold no data.
//! - `GET /console/api/session`, `GET /console/api/overview` (`overview`),
//!   `GET /console/api/tenants/<tenant>/activity[?week]` (`activity`: a tenant page's figures),
//!   and `POST /console/api/tenants/<tenant>/<verb>` with the query API's body for
//!   `get`, `list`, `stats`, `cancel` and `cancel-many` (`api`): each needs a token (`auth`),
//!   and a tenant's token reaches only its own tenant, whatever the path or body say (the
//!   tenant comes from the path alone, and the API's bodies name none).
//! - A `POST` must be JSON and must not come from another site (`Origin`, `Sec-Fetch-Site`);
//!   with the token in a header rather than a cookie, a cross-site request has nothing to act
//!   with anyway.
//! - Every answer carries the Content-Security-Policy and headers that keep the page out of
//!   frames and its data out of caches and `Referer`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::actors::registry::Registry;
use crate::config::ConsoleSettings;
use crate::domain::Subjects;
use crate::domain::api::{ApiError, Verb};
use crate::domain::quota::Quotas;
use crate::domain::tenant::check_tenant_id;
use crate::health::Health;

mod activity;
mod api;
mod assets;
mod auth;
mod census_cache;
mod forecast_cache;
mod overview;

pub use assets::CONTENT_SECURITY_POLICY;
use auth::{Principal, Tokens};

/// What the console needs of its daemon.
#[derive(Clone)]
pub struct ConsoleArgs {
    pub settings: ConsoleSettings,
    pub registry: Registry,
    pub health: Health,
    pub subjects: Subjects,
    /// The daemon's name, shown on the overview.
    pub daemon: String,
    /// The quotas in force (they change on SIGHUP).
    pub quotas: QuotasInForce,
}

/// The console's shared state.
pub(crate) struct Console {
    tokens: Tokens,
    registry: Registry,
    health: Health,
    subjects: Subjects,
    daemon: String,
    quotas: QuotasInForce,
    census: census_cache::CensusCache,
    forecasts: forecast_cache::ForecastCache,
}

/// The quotas in force, as the daemon publishes them.
pub type QuotasInForce = tokio::sync::watch::Receiver<Arc<Quotas>>;

type Shared = Arc<Console>;

/// The console's routes, to be merged into the HTTP listener's router.
pub fn router(args: ConsoleArgs) -> Router {
    let console = Arc::new(Console {
        tokens: Tokens::new(&args.settings),
        registry: args.registry,
        health: args.health,
        subjects: args.subjects,
        daemon: args.daemon,
        quotas: args.quotas,
        census: Default::default(),
        forecasts: Default::default(),
    });
    Router::new()
        .route("/console", get(|| async { assets::page() }))
        .route(
            "/console/",
            get(|| async { Redirect::permanent("/console") }),
        )
        .route("/console/assets/{file}", get(asset))
        .route("/console/api/session", get(session))
        .route("/console/api/overview", get(overview))
        .route("/console/api/tenants/{tenant}/activity", get(activity))
        .route("/console/api/tenants/{tenant}/{verb}", post(tenant_request))
        .fallback(|| async { not_found() })
        .with_state(console)
        .layer(middleware::from_fn(guard))
}

async fn asset(Path(file): Path<String>) -> Response {
    assets::asset(&file)
}

/// Who the token names: the page shows the operator's view or a tenant's.
async fn session(State(console): State<Shared>, headers: HeaderMap) -> Response {
    match console.tokens.principal(&headers) {
        Some(Principal::Operator) => api::json_bytes(
            StatusCode::OK,
            json!({"role": "operator"}).to_string().into_bytes(),
        ),
        Some(Principal::Tenant(tenant)) => api::json_bytes(
            StatusCode::OK,
            json!({"role": "tenant", "tenant": tenant})
                .to_string()
                .into_bytes(),
        ),
        None => unauthorized(),
    }
}

async fn overview(State(console): State<Shared>, headers: HeaderMap) -> Response {
    match console.tokens.principal(&headers) {
        Some(principal) => console.overview(&principal).await,
        None => unauthorized(),
    }
}

/// A tenant's activity, quotas and (with `?week`) its week ahead by hour.
async fn activity(
    State(console): State<Shared>,
    Path(tenant): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = console.refusal(&headers, &tenant) {
        return refused;
    }
    let week = uri
        .query()
        .is_some_and(|query| query.split('&').any(|part| part == "week"));
    console.activity(&tenant, week).await
}

/// One of the query API's requests for `tenant`, on behalf of a principal that may see it.
async fn tenant_request(
    State(console): State<Shared>,
    Path((tenant, verb)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = console.refusal(&headers, &tenant) {
        return refused;
    }
    let Some(verb) = Verb::parse(&verb) else {
        return not_found();
    };
    console.ask(verb, &tenant, body).await
}

impl Console {
    /// Why the request's token may not see `tenant`, if it may not: 401 without a valid
    /// token, 400 for a malformed tenant id, 403 for another tenant's.
    fn refusal(&self, headers: &HeaderMap, tenant: &str) -> Option<Response> {
        let Some(principal) = self.tokens.principal(headers) else {
            return Some(unauthorized());
        };
        if let Err(reason) = check_tenant_id(tenant) {
            return Some(api::error(ApiError::bad_request(reason)));
        }
        (!principal.may_see(tenant)).then(|| {
            api::error(ApiError {
                code: 403,
                message: "this token does not give access to that tenant".into(),
                retry_after: None,
            })
        })
    }
}

fn unauthorized() -> Response {
    let mut response = api::error(ApiError {
        code: 401,
        message: "a console token is needed (Authorization: Bearer …)".into(),
        retry_after: None,
    });
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"timer-service console\""),
    );
    response
}

fn not_found() -> Response {
    api::error(ApiError::not_found("no such console page"))
}

/// Refuses a `POST` from another site or not in JSON, and puts the security headers on every
/// answer.
async fn guard(request: Request, next: Next) -> Response {
    if request.method() == Method::POST
        && let Err(reason) = same_site_json(request.headers())
    {
        return with_security_headers(api::error(ApiError {
            code: 403,
            message: reason.into(),
            retry_after: None,
        }));
    }
    with_security_headers(next.run(request).await)
}

/// A `POST` the console's own script sends: JSON, from the console's own origin.
fn same_site_json(headers: &HeaderMap) -> Result<(), &'static str> {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if text(header::HeaderName::from_static("sec-fetch-site"))
        .is_some_and(|site| site != "same-origin" && site != "none")
    {
        return Err("a request from another site is refused");
    }
    if let Some(origin) = text(header::ORIGIN) {
        let host = text(header::HOST).unwrap_or_default();
        let origin_host = origin.split_once("://").map_or("", |(_, host)| host);
        if origin_host != host {
            return Err("a request from another origin is refused");
        }
    }
    let json = text(header::CONTENT_TYPE)
        .is_some_and(|kind| kind.split(';').next() == Some("application/json"));
    if !json {
        return Err("a console request must be JSON (Content-Type: application/json)");
    }
    Ok(())
}

fn with_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        headers.insert(
            header::HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn only_json_from_the_consoles_own_origin_may_act() {
        let json = ("content-type", "application/json");
        let host = ("host", "127.0.0.1:9464");
        assert!(same_site_json(&headers(&[json, host])).is_ok());
        assert!(
            same_site_json(&headers(&[json, host, ("origin", "http://127.0.0.1:9464")])).is_ok()
        );
        assert!(same_site_json(&headers(&[json, host, ("sec-fetch-site", "same-origin")])).is_ok());
        for refused in [
            headers(&[json, host, ("origin", "http://evil.example")]),
            headers(&[json, host, ("sec-fetch-site", "cross-site")]),
            headers(&[json, host, ("sec-fetch-site", "same-site")]),
            headers(&[host, ("content-type", "text/plain")]),
            headers(&[host]),
        ] {
            assert!(same_site_json(&refused).is_err(), "{refused:?}");
        }
    }
}
