//! What the generated schema is made of: a message's fields by number, each with the name
//! its JSON form has and what Go's `encoding/json` does with its zero value.
//!
//! The types are `pub` in a private module: the public [`Protobuf`](super::Protobuf) trait's
//! hidden method names [`Message`], which seals the trait (no one outside can name it).
#![allow(unreachable_pub)]

/// A protobuf message of the Kubernetes API.
#[derive(Debug)]
pub struct Message {
    /// The Go type's name, for errors.
    pub name: &'static str,
    /// Its fields, by number.
    pub fields: &'static [Field],
}

/// One field of a [`Message`].
#[derive(Debug)]
pub struct Field {
    /// The protobuf field number.
    pub number: u32,
    /// The field's name in JSON.
    pub json: &'static str,
    /// What one value of it is.
    pub kind: Kind,
    /// A list (each element its own protobuf field entry).
    pub repeated: bool,
    /// JSON leaves the field out when it holds its zero value (`omitempty` on a field that
    /// is neither a pointer nor a struct), where protobuf writes it: decoding leaves it out
    /// too, so both encodings give the same object.
    pub zero_omitted: bool,
}

/// What one value of a [`Field`] is.
#[derive(Debug)]
pub enum Kind {
    /// A UTF-8 string.
    String,
    /// `bool`, a varint.
    Bool,
    /// `int32`, a varint.
    Int32,
    /// `int64`, a varint.
    Int64,
    /// `double`, 8 bytes.
    Double,
    /// A message.
    Message(&'static Message),
    /// `map<string, V>`: entries of key 1 and value 2.
    Map(&'static Kind),
    /// `metav1.Time`: seconds (1) and nanoseconds (2); JSON has RFC 3339 to the second.
    Time,
    /// `metav1.MicroTime`: as `Time`, JSON to the microsecond.
    MicroTime,
    /// `resource.Quantity`: its string (1).
    Quantity,
    /// `intstr.IntOrString`: type (1: 0 int, 1 string), int (2), string (3).
    IntOrString,
    /// `metav1.FieldsV1`: JSON (1), embedded as it is.
    FieldsV1,
}
