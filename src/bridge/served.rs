//! A response the core made without the app (the static route), told to the loop thread
//! only for its access line and the request metrics (`Event::Served`), so those treat it
//! like any app response.

use std::net::SocketAddr;

use http::{Method, Uri, Version};

use crate::access_log::json::RequestFields;

pub(crate) struct Served {
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) version: Version,
    pub(crate) status: u16,
    /// Body bytes the response sends (0 for HEAD and 304).
    pub(crate) bytes: u64,
    /// Seconds from the request's arrival to its response's head.
    pub(crate) duration: f64,
    /// For the JSON access line.
    pub(crate) fields: RequestFields,
}
