//! Validation of the messages an app passes to `send()`: every fault becomes a TypeError or
//! ValueError that names the offending key.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, PyTypeInfo};

use crate::http::header_order::{marked_map, still_grouped};
use crate::http::headers::{response_header_name, response_header_value, HeaderError};

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The message as a dict (the spec says dict; any Mapping subclass of dict works too).
pub(crate) fn as_dict<'a, 'py>(message: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyDict>> {
    message.downcast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "ASGI message must be a dict, got {}",
            type_name(message)
        ))
    })
}

/// The message's `type`, as a Python string (caller compares it).
pub(crate) fn message_type<'py>(message: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyString>> {
    let py = message.py();
    match message.get_item(intern!(py, "type"))? {
        None => Err(PyValueError::new_err(
            "ASGI message is missing the 'type' key",
        )),
        Some(t) => match t.downcast::<PyString>() {
            Ok(s) => Ok(s.clone()),
            Err(_) => Err(PyTypeError::new_err(format!(
                "ASGI message 'type' must be a str, got {}",
                type_name(&t)
            ))),
        },
    }
}

pub(crate) fn parse_response_start(
    message: &Bound<'_, PyDict>,
) -> PyResult<(StatusCode, HeaderMap)> {
    let py = message.py();
    let status = match message.get_item(intern!(py, "status"))? {
        None => {
            return Err(PyValueError::new_err(
                "'http.response.start' message is missing the required 'status' key",
            ))
        }
        Some(s) => s,
    };
    if status.is_instance_of::<PyBool>() || !status.is_instance_of::<pyo3::types::PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "'status' must be an int, got {}",
            type_name(&status)
        )));
    }
    let status = status
        .extract::<u16>()
        .ok()
        .filter(|c| (200..=599).contains(c))
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| {
            // Name the value as Python shows it (it may not fit any Rust integer).
            let shown = status.str().map(|s| s.to_string()).unwrap_or_default();
            PyValueError::new_err(format!(
                "'status' must be a final HTTP status code (200-599), got {shown}"
            ))
        })?;
    let headers = match message.get_item(intern!(py, "headers"))? {
        None => HeaderMap::new(),
        Some(h) => parse_headers(&h, "headers", true)?,
    };
    Ok((status, headers))
}

/// `[[name, value], ...]` of bytes into a HeaderMap, refusing anything that could split or
/// inject headers. `ordered`: the map keeps the app's order across names on HTTP/1.1 (a
/// response head; see `http::header_order`), not wanted for trailers.
pub(crate) fn parse_headers(
    headers: &Bound<'_, PyAny>,
    key: &str,
    ordered: bool,
) -> PyResult<HeaderMap> {
    let mut map = HeaderMap::new();
    // Lists (the common case) are walked directly; anything else iterable works too.
    if let Ok(list) = headers.downcast::<PyList>() {
        // Sized for the app's headers plus the two the server adds (Server, Content-Length):
        // hyper keeps the last response's map in every idle keep-alive connection, and one
        // grown from empty has room for six (624 bytes of entries).
        map.reserve(list.len() + 2);
        let mut grouped = true;
        for item in list.iter() {
            let (name, value) = header(&item, key)?;
            if map.append(name, value) && grouped && ordered {
                // A repeated name (Set-Cookie): its item is read again rather than every
                // name cloned for this look.
                let (name, _) = header(&item, key)?;
                grouped = still_grouped(&map, &name, true);
            }
        }
        if !grouped && ordered {
            // Rare: interleaved names. Walked again (all valid now) for the order.
            let pairs = list
                .iter()
                .map(|item| header(&item, key))
                .collect::<PyResult<Vec<_>>>()?;
            return Ok(marked_map(pairs));
        }
        return Ok(map);
    }
    let iter = headers.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "'{key}' must be an iterable of [name, value] pairs, got {}",
            type_name(headers)
        ))
    })?;
    let mut pairs = Vec::new();
    for item in iter {
        pairs.push(header(&item?, key)?);
    }
    let mut grouped = true;
    for (name, value) in &pairs {
        let existed = map.append(name.clone(), value.clone());
        grouped = grouped && still_grouped(&map, name, existed);
    }
    if !grouped && ordered {
        return Ok(marked_map(pairs));
    }
    Ok(map)
}

#[inline]
fn header(item: &Bound<'_, PyAny>, key: &str) -> PyResult<(HeaderName, HeaderValue)> {
    let (name, value) = header_pair(item, key)?;
    let name_bytes = header_bytes(&name, key, "name")?;
    let value_bytes = header_bytes(&value, key, "value")?;
    let name = response_header_name(name_bytes.as_bytes()).map_err(|_| {
        PyValueError::new_err(format!(
            "'{key}' has an invalid header name {:?}",
            String::from_utf8_lossy(name_bytes.as_bytes())
        ))
    })?;
    let value = response_header_value(value_bytes.as_bytes()).map_err(|e| {
        debug_assert_eq!(e, HeaderError::InvalidValue);
        PyValueError::new_err(format!(
            "'{key}' has an invalid value for header {:?} (CR, LF, NUL and control \
             characters are not allowed)",
            name.as_str()
        ))
    })?;
    Ok((name, value))
}

type Pair<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>);

fn header_pair<'py>(item: &Bound<'py, PyAny>, key: &str) -> PyResult<Pair<'py>> {
    let pair_error = || {
        PyTypeError::new_err(format!(
            "each item of '{key}' must be a [name, value] pair of bytes, got {}",
            type_name(item)
        ))
    };
    if let Ok(pair) = item.downcast::<PyTuple>() {
        if pair.len() != 2 {
            return Err(pair_error());
        }
        return Ok((pair.get_item(0)?, pair.get_item(1)?));
    }
    if let Ok(pair) = item.downcast::<PyList>() {
        if pair.len() != 2 {
            return Err(pair_error());
        }
        return Ok((pair.get_item(0)?, pair.get_item(1)?));
    }
    if item.is_instance_of::<PyString>() || item.is_instance_of::<PyBytes>() {
        return Err(pair_error());
    }
    if item.len().map_err(|_| pair_error())? != 2 {
        return Err(pair_error());
    }
    Ok((item.get_item(0)?, item.get_item(1)?))
}

fn header_bytes<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    key: &str,
    what: &str,
) -> PyResult<&'a Bound<'py, PyBytes>> {
    obj.downcast::<PyBytes>().map_err(|_| {
        PyTypeError::new_err(format!(
            "header {what}s in '{key}' must be bytes, got {}",
            type_name(obj)
        ))
    })
}

pub(crate) fn parse_response_body(message: &Bound<'_, PyDict>) -> PyResult<(Bytes, bool)> {
    let py = message.py();
    let body = match message.get_item(intern!(py, "body"))? {
        None => Bytes::new(),
        Some(b) => body_bytes(&b, "body")?,
    };
    let more_body = match message.get_item(intern!(py, "more_body"))? {
        None => false,
        Some(m) => m.is_truthy()?,
    };
    Ok((body, more_body))
}

/// `path` of `http.response.pathsend`: a str (or an `os.PathLike` giving one).
pub(crate) fn parse_pathsend(message: &Bound<'_, PyDict>) -> PyResult<std::path::PathBuf> {
    let py = message.py();
    let Some(value) = message.get_item(intern!(py, "path"))? else {
        return Err(PyValueError::new_err(
            "'http.response.pathsend' message is missing the required 'path' key",
        ));
    };
    let text = if let Ok(text) = value.downcast::<PyString>() {
        text.to_str()?.to_owned()
    } else if let Ok(fspath) = value.call_method0(intern!(py, "__fspath__")) {
        match fspath.downcast::<PyString>() {
            Ok(text) => text.to_str()?.to_owned(),
            Err(_) => {
                return Err(PyTypeError::new_err(
                    "'path' must be a str (its __fspath__() returned another type)",
                ))
            }
        }
    } else {
        return Err(PyTypeError::new_err(format!(
            "'path' must be a str, got {}",
            type_name(&value)
        )));
    };
    if text.contains('\0') {
        return Err(PyValueError::new_err("'path' contains a NUL character"));
    }
    Ok(std::path::PathBuf::from(text))
}

/// `http.response.zerocopysend` taken apart: the app's descriptor (it keeps it), the span
/// (`offset` None: the file's current position; `count` None: to the end) and `more_body`.
pub(crate) struct ZeroCopySend {
    pub(crate) fd: std::os::fd::RawFd,
    pub(crate) offset: Option<u64>,
    pub(crate) count: Option<u64>,
    pub(crate) more_body: bool,
}

pub(crate) fn parse_zerocopysend(message: &Bound<'_, PyDict>) -> PyResult<ZeroCopySend> {
    let py = message.py();
    let Some(file) = message.get_item(intern!(py, "file"))? else {
        return Err(PyValueError::new_err(
            "'http.response.zerocopysend' message is missing the required 'file' key",
        ));
    };
    let fd = if file.is_instance_of::<pyo3::types::PyInt>() && !file.is_instance_of::<PyBool>() {
        file.extract::<i64>().ok()
    } else if file.hasattr(intern!(py, "fileno"))? {
        let fileno = file.call_method0(intern!(py, "fileno")).map_err(|err| {
            PyValueError::new_err(format!(
                "'file' has no usable file descriptor: fileno() raised {err}"
            ))
        })?;
        Some(fileno.extract::<i64>().map_err(|_| {
            PyTypeError::new_err(format!(
                "'file'.fileno() must return an int, got {}",
                type_name(&fileno)
            ))
        })?)
    } else {
        return Err(PyTypeError::new_err(format!(
            "'file' must be an open file (with fileno()) or an int file descriptor, got {}",
            type_name(&file)
        )));
    };
    let fd = match fd.and_then(|fd| std::os::fd::RawFd::try_from(fd).ok()) {
        Some(fd) if fd >= 0 => fd,
        _ => {
            return Err(PyValueError::new_err(format!(
                "'file' must be a file descriptor >= 0, got {file}"
            )))
        }
    };
    let mut offset = span_value(message, intern!(py, "offset"), "offset")?;
    if offset.is_none() && !file.is_instance_of::<pyo3::types::PyInt>() {
        // A buffered file object's position is its tell(), not its descriptor's (which is
        // ahead by what it has buffered).
        if let Ok(at) = file.call_method0(intern!(py, "tell")) {
            offset = at.extract::<u64>().ok();
        }
    }
    let count = span_value(message, intern!(py, "count"), "count")?;
    let more_body = match message.get_item(intern!(py, "more_body"))? {
        None => false,
        Some(m) => m.is_truthy()?,
    };
    Ok(ZeroCopySend {
        fd,
        offset,
        count,
        more_body,
    })
}

/// `offset` / `count` of `http.response.zerocopysend`: an int >= 0, or absent (or None).
fn span_value(
    message: &Bound<'_, PyDict>,
    name: &Bound<'_, PyString>,
    key: &str,
) -> PyResult<Option<u64>> {
    let Some(value) = message.get_item(name)? else {
        return Ok(None);
    };
    if value.is_none() {
        return Ok(None);
    }
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<pyo3::types::PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "'{key}' must be an int, got {}",
            type_name(&value)
        )));
    }
    value
        .extract::<u64>()
        .map(Some)
        .map_err(|_| PyValueError::new_err(format!("'{key}' must be an int >= 0, got {value}")))
}

pub(crate) fn body_bytes(obj: &Bound<'_, PyAny>, key: &str) -> PyResult<Bytes> {
    if let Ok(b) = obj.downcast::<PyBytes>() {
        // Copied, not shared: a shared buffer would keep its `bytes` object until an I/O
        // thread let go of it (PyO3 defers that decref to the loop thread's next entry), and
        // freeing bodies late made the heap shrink and grow: a 1 MiB download in fresh 64 KiB
        // chunks went from 4.1-4.3k to 1.4k req/s, a 10 KiB echo from 72k to 54k.
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(b) = obj.downcast::<PyByteArray>() {
        return Ok(Bytes::from(b.to_vec()));
    }
    if PyString::is_type_of(obj) {
        return Err(PyTypeError::new_err(format!(
            "'{key}' must be bytes, got str (encode it first)"
        )));
    }
    Err(PyTypeError::new_err(format!(
        "'{key}' must be bytes, got {}",
        type_name(obj)
    )))
}

/// `trailers` of `http.response.start`: a bool (default False). A truthy non-bool is refused
/// because it changes how the response ends, so a typo must not pass silently.
pub(crate) fn parse_trailers_flag(message: &Bound<'_, PyDict>) -> PyResult<bool> {
    let py = message.py();
    match message.get_item(intern!(py, "trailers"))? {
        None => Ok(false),
        Some(t) => match t.downcast::<PyBool>() {
            Ok(b) => Ok(b.is_true()),
            Err(_) => Err(PyTypeError::new_err(format!(
                "'trailers' must be a bool, got {}",
                type_name(&t)
            ))),
        },
    }
}

/// Fields that must not appear in trailers: framing, routing, connection-specific and
/// processing fields a recipient has to know before the body (RFC 9110 §6.5.1). hyper's own
/// HTTP/1 list plus the hop-by-hop fields HTTP/2 forbids outright (RFC 9113 §8.2.2).
const FORBIDDEN_TRAILERS: &[&str] = &[
    "authorization",
    "cache-control",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "host",
    "keep-alive",
    "max-forwards",
    "proxy-connection",
    "set-cookie",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// `http.response.trailers`: its validated `headers` and `more_trailers` (truthy, like
/// `more_body`).
pub(crate) fn parse_response_trailers(message: &Bound<'_, PyDict>) -> PyResult<(HeaderMap, bool)> {
    let py = message.py();
    let headers = match message.get_item(intern!(py, "headers"))? {
        None => HeaderMap::new(),
        Some(h) => parse_headers(&h, "headers", false)?,
    };
    // parse_headers already refuses pseudo-headers (':' is not a token character).
    if let Some(name) = headers
        .keys()
        .find(|n| FORBIDDEN_TRAILERS.contains(&n.as_str()))
    {
        return Err(PyValueError::new_err(format!(
            "'headers' of 'http.response.trailers' has {:?}, which is not allowed in trailers",
            name.as_str()
        )));
    }
    let more_trailers = match message.get_item(intern!(py, "more_trailers"))? {
        None => false,
        Some(m) => m.is_truthy()?,
    };
    Ok((headers, more_trailers))
}

/// At most this many `Link` values in one `http.response.early_hint` (a 103 is a head: the
/// client's own header limits apply to it; hyper's default for a request is 100 fields).
pub(crate) const MAX_EARLY_HINT_LINKS: usize = 100;

/// `http.response.early_hint`'s `links`: a list (or tuple) of bytes, each one `Link` field
/// value (RFC 8288). What hypercorn and h2corn accept, and what Starlette's helper sends.
pub(crate) fn parse_early_hint(message: &Bound<'_, PyDict>) -> PyResult<Vec<HeaderValue>> {
    let py = message.py();
    let Some(links) = message.get_item(intern!(py, "links"))? else {
        return Err(PyValueError::new_err(
            "'http.response.early_hint' message is missing the required 'links' key",
        ));
    };
    if !(links.is_instance_of::<PyList>() || links.is_instance_of::<PyTuple>()) {
        return Err(PyTypeError::new_err(format!(
            "'links' must be a list of bytes, got {}",
            type_name(&links)
        )));
    }
    let count = links.len()?;
    if count > MAX_EARLY_HINT_LINKS {
        return Err(PyValueError::new_err(format!(
            "'links' has {count} entries; at most {MAX_EARLY_HINT_LINKS} fit one early hint"
        )));
    }
    let mut values = Vec::with_capacity(count);
    for (i, link) in links.try_iter()?.enumerate() {
        let link = link?;
        let Ok(bytes) = link.downcast::<PyBytes>() else {
            return Err(PyTypeError::new_err(format!(
                "'links'[{i}] must be bytes, got {}",
                type_name(&link)
            )));
        };
        let bytes = bytes.as_bytes();
        if bytes.is_empty() {
            return Err(PyValueError::new_err(format!("'links'[{i}] is empty")));
        }
        let value = HeaderValue::from_bytes(bytes).map_err(|_| {
            PyValueError::new_err(format!(
                "'links'[{i}] is not a valid header value (CR, LF, NUL or another control \
                 character): {:?}",
                String::from_utf8_lossy(bytes)
            ))
        })?;
        values.push(value);
    }
    Ok(values)
}
