//! Editing an object's protobuf on the wire: a field set, map entries set, entries of a
//! repeated field dropped, and every other field kept byte for byte as the API server sent
//! it, whether this binary's types know it or not.
//!
//! An update (PUT) replaces the whole object, so one built from a decoded object drops
//! every field the decoding types do not know (a field of a newer Kubernetes than the
//! binary's k8s-openapi); one built by these functions from the server's own bytes drops
//! nothing. Fields are addressed by number, looked up by their JSON names in the schema
//! ([`Message::number`]), so a caller reads as the JSON Patch it replaces.

use std::collections::BTreeMap;

use super::schema_types::{Kind, Message};
use super::wire::{Fields, Value, put_bytes, spans};
use super::{DecodeError, MAGIC};

impl Message {
    /// The number of the field whose JSON name is `json`.
    ///
    /// # Panics
    ///
    /// If the message has no such field: the schema is generated, so this is a caller's
    /// typo, caught by any test that runs the caller.
    pub(crate) fn number(&self, json: &str) -> u32 {
        self.field(json).0
    }

    /// The message a field holds, by JSON name (panics as [`number`](Self::number), and
    /// when the field is not a message).
    pub(crate) fn message(&self, json: &str) -> &'static Message {
        match self.field(json).1 {
            Kind::Message(m) => m,
            other => panic!("{}.{json} is a {other:?}, not a message", self.name),
        }
    }

    fn field(&self, json: &str) -> (u32, &Kind) {
        let field = self
            .fields
            .iter()
            .find(|f| f.json == json)
            .unwrap_or_else(|| panic!("{} has no field {json}", self.name));
        (field.number, &field.kind)
    }
}

/// `message` with its submessage `number` replaced by what `edit` makes of it (of an empty
/// message when it is absent), in its place. A message field written twice (which protobuf
/// would merge, and the API server never writes) is refused.
pub(crate) fn edit_message(
    message: &[u8],
    number: u32,
    edit: impl FnOnce(&[u8]) -> Result<Vec<u8>, DecodeError>,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(message.len() + 64);
    let mut edit = Some(edit);
    for span in spans(message) {
        let (n, value, raw) = span?;
        if n != number {
            out.extend_from_slice(raw);
            continue;
        }
        let (Value::Bytes(old), Some(edit)) = (value, edit.take()) else {
            return Err(DecodeError::Malformed("a message field written twice"));
        };
        put_bytes(&mut out, number, &edit(old)?);
    }
    if let Some(edit) = edit {
        put_bytes(&mut out, number, &edit(&[])?);
    }
    Ok(out)
}

/// `message` with the string (or bytes) field `number` set to `value`.
pub(crate) fn set_bytes(message: &[u8], number: u32, value: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut out = retain(message, number, |_| Ok(false))?;
    put_bytes(&mut out, number, value);
    Ok(out)
}

/// `message` with the entries of its `map<string, string>` field `number` set to
/// `entries`: an entry of another key is kept, one of a key in `entries` replaced.
pub(crate) fn set_map_entries(
    message: &[u8],
    number: u32,
    entries: &BTreeMap<String, String>,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = retain(message, number, |entry| {
        let key = super::string(entry, 1)?;
        Ok(!entries.contains_key(&key))
    })?;
    let mut entry = Vec::new();
    for (key, value) in entries {
        entry.clear();
        put_bytes(&mut entry, 1, key.as_bytes());
        put_bytes(&mut entry, 2, value.as_bytes());
        put_bytes(&mut out, number, &entry);
    }
    Ok(out)
}

/// `message` without the entries of field `number` for which `keep` answers `false` (it is
/// given a length-delimited entry's bytes; an entry of another wire type is dropped).
pub(crate) fn retain(
    message: &[u8],
    number: u32,
    mut keep: impl FnMut(&[u8]) -> Result<bool, DecodeError>,
) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(message.len());
    for span in spans(message) {
        let (n, value, raw) = span?;
        let kept = match (n == number, value) {
            (false, _) => true,
            (true, Value::Bytes(entry)) => keep(entry)?,
            (true, _) => false,
        };
        if kept {
            out.extend_from_slice(raw);
        }
    }
    Ok(out)
}

/// The length-delimited entries of field `number`, in wire order.
pub(crate) fn entries(message: &[u8], number: u32) -> Result<Vec<&[u8]>, DecodeError> {
    let mut out = Vec::new();
    for field in Fields(message) {
        if let (n, Value::Bytes(entry)) = field?
            && n == number
        {
            out.push(entry);
        }
    }
    Ok(out)
}

/// An object's message as the API server takes it: `k8s\0`, then a `runtime.Unknown` of
/// its `apiVersion` and `kind` (the TypeMeta, field 1) and the message (`raw`, field 2).
pub(crate) fn envelope(api_version: &str, kind: &str, message: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes(&mut type_meta, 1, api_version.as_bytes());
    put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = Vec::with_capacity(MAGIC.len() + type_meta.len() + message.len() + 16);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, 1, &type_meta);
    put_bytes(&mut out, 2, message);
    out
}

#[cfg(test)]
mod tests {
    use super::super::schema::{META_OBJECT_META, NODE};
    use super::super::wire::put_varint;
    use super::*;

    fn field(number: u32, s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        put_bytes(&mut out, number, s.as_bytes());
        out
    }

    #[test]
    fn numbers_come_from_the_schema() {
        assert_eq!(NODE.number("metadata"), 1);
        assert_eq!(NODE.number("spec"), 2);
        assert_eq!(NODE.message("spec").number("providerID"), 3);
        assert_eq!(NODE.message("spec").number("taints"), 5);
        assert_eq!(META_OBJECT_META.number("labels"), 11);
    }

    #[test]
    #[should_panic(expected = "NodeSpec has no field providerId")]
    fn a_misspelt_field_panics() {
        NODE.message("spec").number("providerId");
    }

    #[test]
    fn every_field_not_edited_is_kept_as_it_was() {
        // fields 1 and 3 (strings), an unknown varint field 99, an unknown message 42
        let mut msg = field(1, "a");
        put_varint(&mut msg, 99 << 3);
        put_varint(&mut msg, 300);
        msg.extend(field(42, "unknown"));
        msg.extend(field(3, "c"));
        let out = set_bytes(&msg, 1, b"b").unwrap();
        // field 1 moved to the end, the rest byte for byte
        let mut want = msg[3..].to_vec();
        want.extend(field(1, "b"));
        assert_eq!(out, want);
        let edited = edit_message(&msg, 42, |old| {
            assert_eq!(old, b"unknown");
            Ok(b"new".to_vec())
        })
        .unwrap();
        let mut want = msg[..7].to_vec(); // fields 1 and 99
        want.extend(field(42, "new"));
        want.extend(field(3, "c"));
        assert_eq!(edited, want);
        // an absent message is edited from empty and appended
        let added = edit_message(&msg, 7, |old| {
            assert!(old.is_empty());
            Ok(b"x".to_vec())
        })
        .unwrap();
        assert_eq!(&added[..msg.len()], &msg[..]);
        assert_eq!(&added[msg.len()..], field(7, "x"));
    }

    #[test]
    fn a_message_written_twice_is_refused() {
        let mut msg = field(2, "one");
        msg.extend(field(2, "two"));
        assert!(edit_message(&msg, 2, |m| Ok(m.to_vec())).is_err());
    }

    #[test]
    fn map_entries_are_replaced_by_key() {
        let entry = |k: &str, v: &str| {
            let mut e = field(1, k);
            e.extend(field(2, v));
            e
        };
        let mut msg = Vec::new();
        put_bytes(&mut msg, 11, &entry("keep", "1"));
        put_bytes(&mut msg, 11, &entry("set", "old"));
        let set = BTreeMap::from([("set".to_owned(), "new".to_owned())]);
        let out = set_map_entries(&msg, 11, &set).unwrap();
        let got: Vec<(String, String)> = entries(&out, 11)
            .unwrap()
            .into_iter()
            .map(|e| {
                (
                    super::super::string(e, 1).unwrap(),
                    super::super::string(e, 2).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [("keep".into(), "1".into()), ("set".into(), "new".into())]
        );
    }

    #[test]
    fn retain_drops_the_entries_refused() {
        let mut msg = field(5, "a");
        msg.extend(field(6, "other"));
        msg.extend(field(5, "b"));
        let out = retain(&msg, 5, |e| Ok(e != b"a")).unwrap();
        let mut want = field(6, "other");
        want.extend(field(5, "b"));
        assert_eq!(out, want);
        assert_eq!(entries(&msg, 5).unwrap(), [&b"a"[..], &b"b"[..]]);
    }

    #[test]
    fn an_envelope_is_read_back() {
        let body = envelope("v1", "Node", b"\x0a\x00");
        assert_eq!(super::super::unwrap(&body).unwrap(), b"\x0a\x00");
        assert!(body.starts_with(b"k8s\0"));
    }

    #[test]
    fn truncated_data_is_an_error() {
        assert!(set_bytes(&[0x0a, 0x05, b'x'], 1, b"y").is_err());
        assert!(retain(&[0x0a, 0x05, b'x'], 1, |_| Ok(true)).is_err());
    }
}
