//! What a listener answers, on axum: the pages' routes (`/`, `/metrics`, `/status.json`, `GET`
//! or `HEAD`), what is mounted beside them (the webhooks, [`Mounted`]), tower-http's limits on
//! a request's body and time, and [`Answer`] as a response.

use super::pages::{Answer, Page, Pages};
use super::snapshot::PageQuery;
use axum::extract::{Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;
use std::time::Duration;

/// The largest body a request may have (1 MiB, a webhook's, [`crate::hooks`]): a longer one
/// is answered 413 and read no further.
pub(crate) const BODY_LIMIT: usize = 1024 * 1024;

/// How long one request may take to be answered (the pages read the home; a webhook announces
/// on the bus) before it is answered 408.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Something else a listener answers under a path of its own (the webhooks,
/// [`crate::hooks`]), mounted beside the pages or alone.
#[async_trait::async_trait]
pub trait Mounted: Send + Sync {
    /// Whether `path` is its.
    fn owns(&self, path: &str) -> bool;

    /// Its answer to `request`.
    async fn respond(&self, request: Request) -> Answer;
}

/// What a listener answers: the status pages, something mounted beside them, or both.
#[derive(Clone, Default)]
pub struct Routes {
    /// The status pages (`/`, `/metrics`, `/status.json`).
    pub pages: Option<Arc<Pages>>,
    /// What is mounted beside them (the webhooks).
    pub mounted: Option<Arc<dyn Mounted>>,
}

impl From<Arc<Pages>> for Routes {
    fn from(pages: Arc<Pages>) -> Routes {
        Routes {
            pages: Some(pages),
            mounted: None,
        }
    }
}

/// An answer as axum sends it, never cached.
impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        (
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            [
                (header::CONTENT_TYPE, self.content_type),
                (header::CACHE_CONTROL, "no-store"),
            ],
            self.body,
        )
            .into_response()
    }
}

/// [`Pages::respond`] run off the runtime's workers (it reads the home).
async fn answer(pages: Arc<Pages>, page: Page) -> Answer {
    tokio::task::spawn_blocking(move || pages.respond(page))
        .await
        .unwrap_or_else(|e| Answer::text(500, format!("the status page failed: {e}\n")))
}

async fn html(State(pages): State<Arc<Pages>>, Query(query): Query<PageQuery>) -> Answer {
    answer(pages, Page::Html(query)).await
}

async fn metrics(State(pages): State<Arc<Pages>>) -> Answer {
    answer(pages, Page::Metrics).await
}

async fn status_json(State(pages): State<Arc<Pages>>) -> Answer {
    answer(pages, Page::StatusJson).await
}

async fn read_only() -> Answer {
    Answer::text(405, "the status pages are read-only: GET or HEAD\n")
}

/// The axum router of `routes`: the pages' three paths (`GET`, and `HEAD` without the body;
/// 405 for another method), what is mounted answering its own paths, 404 for the rest; every
/// request's body limited to [`BODY_LIMIT`] (413) and its answer to
/// [`REQUEST_TIMEOUT`] (408). An embedding tool can serve it on any tower-compatible stack.
pub(crate) fn router(routes: Routes) -> Router {
    let Routes { pages, mounted } = routes;
    let has_pages = pages.is_some();
    let router = match pages {
        Some(pages) => Router::new()
            .route("/", get(html).fallback(read_only))
            .route("/metrics", get(metrics).fallback(read_only))
            .route("/status.json", get(status_json).fallback(read_only))
            .with_state(pages),
        None => Router::new(),
    };
    router
        .fallback(move |request: Request| {
            let mounted = mounted.clone();
            async move {
                if let Some(mounted) = mounted.filter(|m| m.owns(request.uri().path())) {
                    return mounted.respond(request).await;
                }
                if has_pages {
                    Answer::text(
                        404,
                        format!(
                            "no page {}: there are /, /metrics and /status.json\n",
                            request.uri().path().chars().take(200).collect::<String>()
                        ),
                    )
                } else {
                    Answer::text(404, "this listener serves only /hooks/NAME\n")
                }
            }
        })
        .layer(tower_http::limit::RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
}
