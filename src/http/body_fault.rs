//! The one error a request body reports (`body_reader::InBody` and each protocol's body
//! adapter): its own module so that the adapters and the reader over them depend on it,
//! not on each other.

/// A body that cannot be read on: broken framing, a reset, a lost connection.
#[derive(Debug)]
pub(crate) struct BodyFault;
