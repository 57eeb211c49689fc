//! A list-then-watch in protobuf, as kube's `watcher` does it in JSON: the same
//! `watcher::Config` (selectors, page size, list semantic, bookmarks, timeout), the same
//! events (`Init`, `InitApply`, `InitDone`, then `Apply` / `Delete`), the same errors (an
//! expired resource version is a `410` the informer re-lists on). A watch the server ends
//! (its timeout) is resumed from the last resource version seen; any error ends the stream,
//! and the informer starts it over.

use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, stream};
use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::BodyExt;
use kube::Client;
use kube::api::{Api, ListParams, VersionMatch, WatchParams};
use kube::core::{Request, Status};
use kube::runtime::watcher::{self, Event, ListSemantic};
use serde::de::DeserializeOwned;

use super::wire::{self, Value};
use super::{DecodeError, Protobuf, decode, decode_message, list_items, string, unwrap};

/// A watch event or a list larger than this is an error (etcd keeps objects under 1.5 MiB
/// by default; a list page holds at most `page_size` of them).
const MAX_FRAME: usize = 16 << 20;
/// A list page larger than this is an error.
const MAX_LIST: usize = 1 << 30;

/// The reason of the error a list or watch fails with when the API server's answer could
/// not be read as protobuf (see [`is_unreadable`]).
const UNREADABLE: &str = "ProtobufUnreadable";

/// Whether `err` says the API server's answer could not be read as protobuf (a field the
/// schema reads otherwise than the server writes it, or an answer in JSON), rather than that
/// the request failed: what [`Informer`](crate::informer::Informer) falls back to JSON on.
pub(crate) fn is_unreadable(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => {
            matches!(e, kube::Error::Api(s) if s.reason == UNREADABLE)
        }
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => false,
    }
}

/// What client-go asks for: protobuf, and JSON for what has no protobuf form.
const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

enum State<K> {
    /// Next: the list's first page (after `Init`).
    Start,
    /// Listing: the next page's continue token.
    Listing { next: Option<String> },
    /// Listed everything up to `version`; next: `InitDone`, then the watch.
    Listed { version: String },
    /// Next: a watch from `version`.
    Resume { version: String },
    /// Watching: the open response's frames.
    Watching { version: String, frames: Frames },
    /// The list's items, one `InitApply` each, then `next`.
    Items {
        items: std::vec::IntoIter<K>,
        next: Box<State<K>>,
    },
    /// An error was yielded; the stream ends.
    Done,
}

/// A watcher of `api` in protobuf, filtered by `config`: what kube's
/// [`watcher`](kube::runtime::watcher()) gives, read in protobuf. A watch the API server ends
/// is resumed from its last resource version; any error ends the stream (start it over, as
/// [`Informer`](crate::informer::Informer) does).
///
/// ```no_run
/// # async fn demo(client: kube::Client) {
/// use ccm_runtime::client::protobuf::watcher;
/// use futures::StreamExt;
/// use k8s_openapi::api::core::v1::Node;
/// use kube::runtime::watcher::{Config, Event};
///
/// let mut events = std::pin::pin!(watcher(kube::Api::<Node>::all(client), Config::default()));
/// while let Some(Ok(event)) = events.next().await {
///     if let Event::Apply(node) = event {
///         println!("{:?}", node.metadata.name);
///     }
/// }
/// # }
/// ```
pub fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Protobuf + DeserializeOwned + Clone + Send + 'static,
{
    let request = Request::new(api.resource_url().to_owned());
    let client = Client::from(api);
    let ctx = std::sync::Arc::new((client, request, config));
    stream::unfold(State::Start, move |state| {
        let ctx = ctx.clone();
        async move {
            let (client, request, config) = &*ctx;
            step(client, request, config, state).await
        }
    })
}

async fn step<K>(
    client: &Client,
    request: &Request,
    config: &watcher::Config,
    mut state: State<K>,
) -> Option<(Result<Event<K>, watcher::Error>, State<K>)>
where
    K: Protobuf + DeserializeOwned,
{
    loop {
        state = match state {
            State::Done => return None,
            State::Start => return Some((Ok(Event::Init), State::Listing { next: None })),
            State::Items { mut items, next } => match items.next() {
                Some(item) => {
                    return Some((Ok(Event::InitApply(item)), State::Items { items, next }));
                }
                None => *next,
            },
            State::Listing { next } => match list_page::<K>(client, request, config, next).await {
                Ok((items, version, cont)) => {
                    let next = match cont {
                        Some(token) => State::Listing { next: Some(token) },
                        None => State::Listed { version },
                    };
                    State::Items {
                        items: items.into_iter(),
                        next: Box::new(next),
                    }
                }
                Err(e) => return Some((Err(watcher::Error::InitialListFailed(e)), State::Done)),
            },
            State::Listed { version } => {
                if version.is_empty() {
                    return Some((Err(watcher::Error::NoResourceVersion), State::Done));
                }
                return Some((Ok(Event::InitDone), State::Resume { version }));
            }
            State::Resume { version } => match start_watch(client, request, config, &version).await
            {
                Ok(frames) => State::Watching { version, frames },
                Err(e) => return Some((Err(watcher::Error::WatchStartFailed(e)), State::Done)),
            },
            State::Watching {
                mut version,
                mut frames,
            } => {
                match frames.next().await {
                    // the server ended the watch (its timeout): resume where it was
                    Ok(None) => State::Resume { version },
                    Ok(Some(frame)) => match watch_event::<K>(&frame) {
                        Ok(WatchEvent::Object {
                            kind,
                            object,
                            version: v,
                        }) => {
                            version = v;
                            let event = if kind == "DELETED" {
                                Event::Delete(*object)
                            } else {
                                Event::Apply(*object)
                            };
                            return Some((Ok(event), State::Watching { version, frames }));
                        }
                        Ok(WatchEvent::Bookmark { version: v }) => {
                            version = v;
                            State::Watching { version, frames }
                        }
                        Ok(WatchEvent::Error(status)) => {
                            return Some((Err(watcher::Error::WatchError(status)), State::Done));
                        }
                        Err(e) => return Some((Err(watcher::Error::WatchFailed(e)), State::Done)),
                    },
                    Err(e) => return Some((Err(watcher::Error::WatchFailed(e)), State::Done)),
                }
            }
        };
    }
}

fn with_accept(mut req: http::Request<Vec<u8>>) -> http::Request<kube::client::Body> {
    req.headers_mut()
        .insert(ACCEPT, http::HeaderValue::from_static(ACCEPT_PROTOBUF));
    req.map(kube::client::Body::from)
}

/// One page of the list: its items, the list's resource version and the next page's token.
async fn list_page<K>(
    client: &Client,
    request: &Request,
    config: &watcher::Config,
    continue_token: Option<String>,
) -> Result<(Vec<K>, String, Option<String>), kube::Error>
where
    K: Protobuf + DeserializeOwned,
{
    let (resource_version, version_match) = match config.list_semantic {
        ListSemantic::Any => (Some("0".to_owned()), Some(VersionMatch::NotOlderThan)),
        ListSemantic::MostRecent => (None, None),
    };
    let mut params = ListParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        limit: config.page_size,
        continue_token,
        resource_version,
        version_match,
        ..Default::default()
    };
    if params.continue_token.is_some() {
        // a continued page is of the first page's snapshot
        params.resource_version = None;
        params.version_match = None;
    }
    let req = request.list(&params).map_err(kube::Error::BuildRequest)?;
    let res = client.send(with_accept(req)).await?;
    let body = body(res, MAX_LIST).await?;
    unwrap(&body)
        .and_then(list_items::<K>)
        .map_err(decode_error)
}

async fn start_watch(
    client: &Client,
    request: &Request,
    config: &watcher::Config,
    version: &str,
) -> Result<Frames, kube::Error> {
    let params = WatchParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        timeout: config.timeout,
        bookmarks: config.bookmarks,
        send_initial_events: false,
    };
    let req = request
        .watch(&params, version)
        .map_err(kube::Error::BuildRequest)?;
    let res = client.send(with_accept(req)).await?;
    if !res.status().is_success() {
        let code = res.status().as_u16();
        return Err(match body(res, MAX_FRAME).await {
            Err(e) => e,
            Ok(_) => kube::Error::Api(Box::new(
                Status::failure("the watch failed", "").with_code(code),
            )),
        });
    }
    let json = res
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json {
        return Err(kube::Error::Api(Box::new(Status::failure(
            "the API server answered a protobuf watch in JSON",
            UNREADABLE,
        ))));
    }
    Ok(Frames {
        body: res.into_body(),
        buf: BytesMut::new(),
    })
}

/// Sends `request` asking for a protobuf answer and reads it whole (at most `limit`
/// bytes): the object as the API server sent it (envelope included), or the server's error
/// as a [`kube::Error::Api`].
pub(crate) async fn send(
    client: &Client,
    request: http::Request<Vec<u8>>,
    limit: usize,
) -> Result<Bytes, kube::Error> {
    body(client.send(with_accept(request)).await?, limit).await
}

/// A response's body: the object, or the server's error as a [`kube::Error::Api`].
async fn body(res: http::Response<kube::client::Body>, limit: usize) -> Result<Bytes, kube::Error> {
    let code = res.status();
    let mut body = res.into_body();
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if buf.len() + data.len() > limit {
                return Err(too_large(limit));
            }
            buf.extend_from_slice(&data);
        }
    }
    let buf = buf.freeze();
    if code.is_success() {
        return Ok(buf);
    }
    let status = decode::<Status>(&buf)
        .ok()
        .or_else(|| serde_json::from_slice::<Status>(&buf).ok())
        .unwrap_or_else(|| {
            Status::failure(&String::from_utf8_lossy(&buf[..buf.len().min(1024)]), "")
                .with_code(code.as_u16())
        });
    Err(kube::Error::Api(Box::new(status)))
}

fn too_large(limit: usize) -> kube::Error {
    kube::Error::Api(Box::new(Status::failure(
        &format!("a response larger than {limit} bytes"),
        "",
    )))
}

fn decode_error(e: DecodeError) -> kube::Error {
    kube::Error::Api(Box::new(Status::failure(&e.to_string(), UNREADABLE)))
}

/// The frames of a protobuf watch: each a 4-byte big-endian length, then that many bytes.
pub(crate) struct Frames {
    body: kube::client::Body,
    buf: BytesMut,
}

impl Frames {
    /// The next frame; `None` when the server ended the watch.
    async fn next(&mut self) -> Result<Option<Bytes>, kube::Error> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])
                    as usize;
                if len > MAX_FRAME {
                    return Err(too_large(MAX_FRAME));
                }
                if self.buf.len() >= 4 + len {
                    self.buf.advance(4);
                    return Ok(Some(self.buf.split_to(len).freeze()));
                }
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

pub(super) enum WatchEvent<K> {
    Object {
        kind: String,
        object: Box<K>,
        version: String,
    },
    Bookmark {
        version: String,
    },
    Error(Box<Status>),
}

/// One frame: a `WatchEvent` (type 1, object 2 whose `raw` (1) is the object in its
/// envelope). The API server frames the event itself without an envelope (its "raw"
/// serializer); either is read.
pub(super) fn watch_event<K: Protobuf + DeserializeOwned>(
    frame: &[u8],
) -> Result<WatchEvent<K>, kube::Error> {
    read_watch_event(frame).map_err(decode_error)
}

fn read_watch_event<K: Protobuf + DeserializeOwned>(
    frame: &[u8],
) -> Result<WatchEvent<K>, DecodeError> {
    let event = maybe_unwrap(frame)?;
    let kind = string(event, 1)?;
    let raw = match wire::last(event, 2)? {
        Some(Value::Bytes(ext)) => match wire::last(ext, 1)? {
            Some(Value::Bytes(raw)) => raw,
            _ => &[],
        },
        _ => &[],
    };
    let object = maybe_unwrap(raw)?;
    match kind.as_str() {
        "ADDED" | "MODIFIED" | "DELETED" => Ok(WatchEvent::Object {
            version: resource_version(object)?,
            object: Box::new(decode_message::<K>(object)?),
            kind,
        }),
        "BOOKMARK" => Ok(WatchEvent::Bookmark {
            version: resource_version(object)?,
        }),
        "ERROR" => Ok(WatchEvent::Error(Box::new(decode_message::<Status>(
            object,
        )?))),
        _ => Err(DecodeError::Malformed("a watch event type")),
    }
}

/// The message in `data`'s envelope, or `data` if it has none.
fn maybe_unwrap(data: &[u8]) -> Result<&[u8], DecodeError> {
    if data.starts_with(super::MAGIC) {
        unwrap(data)
    } else {
        Ok(data)
    }
}

/// `metadata.resourceVersion` (field 1, then 6) of an object's message.
fn resource_version(object: &[u8]) -> Result<String, DecodeError> {
    match wire::last(object, 1)? {
        Some(Value::Bytes(meta)) => string(meta, 6),
        _ => Ok(String::new()),
    }
}
