//! A serde `Deserializer` over protobuf wire data, driven by the schema: a message reads as
//! a map keyed by its fields' JSON names, so any `Deserialize` type that reads the object's
//! JSON (k8s-openapi's, of whichever Kubernetes version) reads its protobuf the same way.
//! Fields the schema does not know are skipped, as unknown JSON names are.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

use super::DecodeError;
use super::schema_types::{Field, Kind, Message};
use super::wire::{self, Fields, Value};

/// Messages nested deeper than this are refused (the deepest the schema has is 6).
const MAX_DEPTH: u32 = 32;

/// A whole message.
pub(crate) struct MessageDe<'a> {
    pub(crate) message: &'static Message,
    pub(crate) bytes: &'a [u8],
    pub(crate) depth: u32,
}

impl<'de> de::Deserializer<'de> for MessageDe<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        if self.depth > MAX_DEPTH {
            return Err(DecodeError::Malformed("messages nested too deep"));
        }
        visitor.visit_map(MessageAccess {
            de: self,
            next: 0,
            value: None,
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

/// The fields of a message that are there, in the schema's order.
struct MessageAccess<'a> {
    de: MessageDe<'a>,
    next: usize,
    value: Option<&'static Field>,
}

impl<'de> de::MapAccess<'de> for MessageAccess<'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        while let Some(field) = self.de.message.fields.get(self.next) {
            self.next += 1;
            if present(field, self.de.bytes)? {
                self.value = Some(field);
                return seed
                    .deserialize(BorrowedStrDeserializer::new(field.json))
                    .map(Some);
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let Some(field) = self.value.take() else {
            return Err(DecodeError::Malformed("a value asked for before its key"));
        };
        seed.deserialize(FieldDe {
            field,
            message: self.de.bytes,
            depth: self.de.depth,
        })
    }
}

/// Whether `field` has a value in `message` that its JSON would have.
fn present(field: &Field, message: &[u8]) -> Result<bool, DecodeError> {
    if field.repeated || matches!(field.kind, Kind::Map(_)) {
        for entry in Fields(message) {
            if entry?.0 == field.number {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    Ok(match wire::last(message, field.number)? {
        None => false,
        Some(value) if field.zero_omitted => !is_zero(value),
        // a zero Time is an empty message in protobuf and `null` in JSON
        Some(Value::Bytes([])) if matches!(field.kind, Kind::Time | Kind::MicroTime) => false,
        Some(_) => true,
    })
}

fn is_zero(value: Value<'_>) -> bool {
    match value {
        Value::Varint(n) | Value::Fixed64(n) => n == 0,
        Value::Fixed32(n) => n == 0,
        Value::Bytes(b) => b.is_empty(),
    }
}

/// One field of a message: a list, a map or one value.
struct FieldDe<'a> {
    field: &'static Field,
    message: &'a [u8],
    depth: u32,
}

impl<'de> FieldDe<'de> {
    /// The value of a field that is neither repeated nor a map: its last occurrence.
    fn value(&self) -> Result<ValueDe<'de>, DecodeError> {
        let value = wire::last(self.message, self.field.number)?
            .ok_or(DecodeError::Malformed("a field that is not there"))?;
        Ok(ValueDe {
            kind: &self.field.kind,
            value,
            depth: self.depth,
        })
    }
}

impl<'de> de::Deserializer<'de> for FieldDe<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let field = self.field;
        if let Kind::Map(value) = field.kind {
            return visitor.visit_map(MapAccess {
                entries: Fields(self.message),
                number: field.number,
                value,
                depth: self.depth,
                pending: None,
            });
        }
        if field.repeated {
            return visitor.visit_seq(SeqAccess {
                entries: Fields(self.message),
                number: field.number,
                kind: &field.kind,
                depth: self.depth,
                packed: &[],
            });
        }
        self.value()?.deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        if matches!(self.field.kind, Kind::FieldsV1) && !self.field.repeated {
            return self.value()?.deserialize_newtype_struct(name, visitor);
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_unit()
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        if self.field.repeated || matches!(self.field.kind, Kind::Map(_)) {
            return self.deserialize_any(visitor);
        }
        self.value()?.deserialize_enum(name, variants, visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// The entries of a repeated field, packed (scalars in one length-delimited value) or not.
struct SeqAccess<'a> {
    entries: Fields<'a>,
    number: u32,
    kind: &'static Kind,
    depth: u32,
    packed: &'a [u8],
}

impl<'de> de::SeqAccess<'de> for SeqAccess<'de> {
    type Error = DecodeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        let scalar = matches!(self.kind, Kind::Bool | Kind::Int32 | Kind::Int64);
        if !self.packed.is_empty() {
            let n = wire::varint(&mut self.packed)?;
            return seed
                .deserialize(ValueDe {
                    kind: self.kind,
                    value: Value::Varint(n),
                    depth: self.depth,
                })
                .map(Some);
        }
        for entry in self.entries.by_ref() {
            let (number, value) = entry?;
            if number != self.number {
                continue;
            }
            if let (true, Value::Bytes(packed)) = (scalar, value) {
                self.packed = packed;
                return self.next_element_seed(seed);
            }
            return seed
                .deserialize(ValueDe {
                    kind: self.kind,
                    value,
                    depth: self.depth,
                })
                .map(Some);
        }
        Ok(None)
    }
}

/// The entries of a `map<string, V>` field: messages of key (1) and value (2).
struct MapAccess<'a> {
    entries: Fields<'a>,
    number: u32,
    value: &'static Kind,
    depth: u32,
    pending: Option<&'a [u8]>,
}

impl<'de> de::MapAccess<'de> for MapAccess<'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        for entry in self.entries.by_ref() {
            let (number, value) = entry?;
            if number != self.number {
                continue;
            }
            let Value::Bytes(entry) = value else {
                return Err(DecodeError::Malformed("a map entry that is not a message"));
            };
            self.pending = Some(entry);
            let key = match wire::last(entry, 1)? {
                Some(Value::Bytes(key)) => utf8(key)?,
                None => "",
                Some(_) => return Err(DecodeError::Malformed("a map key that is not a string")),
            };
            return seed
                .deserialize(BorrowedStrDeserializer::new(key))
                .map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let Some(entry) = self.pending.take() else {
            return Err(DecodeError::Malformed("a value asked for before its key"));
        };
        // a value left out is the zero value: protobuf writes no empty string
        let value = wire::last(entry, 2)?.unwrap_or(Value::Bytes(&[]));
        seed.deserialize(ValueDe {
            kind: self.value,
            value,
            depth: self.depth,
        })
    }
}

/// One value of a kind.
struct ValueDe<'a> {
    kind: &'static Kind,
    value: Value<'a>,
    depth: u32,
}

impl<'de> ValueDe<'de> {
    fn bytes(&self) -> Result<&'de [u8], DecodeError> {
        match self.value {
            Value::Bytes(b) => Ok(b),
            _ => Err(DecodeError::Malformed(
                "a scalar where a string or message belongs",
            )),
        }
    }

    fn varint(&self) -> Result<u64, DecodeError> {
        match self.value {
            Value::Varint(n) => Ok(n),
            _ => Err(DecodeError::Malformed(
                "a string or message where a number belongs",
            )),
        }
    }

    /// The value of a kind that is neither a message, a map nor managed fields.
    fn scalar(&self) -> Result<Scalar<'de>, DecodeError> {
        Ok(match self.kind {
            Kind::String => Scalar::Str(utf8(self.bytes()?)?),
            Kind::Bool => Scalar::Bool(self.varint()? != 0),
            // int32 is sign-extended to 64 bits on the wire
            Kind::Int32 => Scalar::I32(self.varint()? as i64 as i32),
            Kind::Int64 => Scalar::I64(self.varint()? as i64),
            Kind::Double => match self.value {
                Value::Fixed64(bits) => Scalar::F64(f64::from_bits(bits)),
                _ => return Err(DecodeError::Malformed("a double that is not 8 bytes")),
            },
            Kind::Time | Kind::MicroTime => {
                let time = self.bytes()?;
                let seconds = match wire::last(time, 1)? {
                    Some(Value::Varint(s)) => s as i64,
                    _ => 0,
                };
                let nanos = match wire::last(time, 2)? {
                    Some(Value::Varint(n)) => n as i64 as i32,
                    _ => 0,
                };
                let micros = matches!(self.kind, Kind::MicroTime).then_some(nanos / 1000);
                Scalar::String(rfc3339(seconds, micros)?)
            }
            Kind::Quantity => match wire::last(self.bytes()?, 1)? {
                Some(Value::Bytes(s)) => Scalar::Str(utf8(s)?),
                _ => Scalar::Str(""),
            },
            Kind::IntOrString => {
                let v = self.bytes()?;
                match wire::last(v, 1)? {
                    Some(Value::Varint(1)) => match wire::last(v, 3)? {
                        Some(Value::Bytes(s)) => Scalar::Str(utf8(s)?),
                        _ => Scalar::Str(""),
                    },
                    _ => match wire::last(v, 2)? {
                        Some(Value::Varint(n)) => Scalar::I32(n as i64 as i32),
                        _ => Scalar::I32(0),
                    },
                }
            }
            Kind::Message(_) | Kind::Map(_) | Kind::FieldsV1 => {
                return Err(DecodeError::Malformed("a message where a scalar belongs"));
            }
        })
    }
}

/// A scalar read off the wire, for a visitor.
enum Scalar<'a> {
    Str(&'a str),
    String(String),
    Bool(bool),
    I32(i32),
    I64(i64),
    F64(f64),
}

impl<'de> de::Deserializer<'de> for ValueDe<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        // Instantiated once per visitor type (about fifty): the scalars are read by one
        // function for all, and managed fields (JSON) where only their own type asks.
        match self.kind {
            Kind::Message(message) => MessageDe {
                message,
                bytes: self.bytes()?,
                depth: self.depth + 1,
            }
            .deserialize_any(visitor),
            Kind::Map(_) => Err(DecodeError::Malformed("a map inside a map")),
            Kind::FieldsV1 => Err(DecodeError::Invalid(
                "managed fields read as another type than FieldsV1".to_owned(),
            )),
            _ => match self.scalar()? {
                Scalar::Str(s) => visitor.visit_borrowed_str(s),
                Scalar::String(s) => visitor.visit_string(s),
                Scalar::Bool(b) => visitor.visit_bool(b),
                Scalar::I32(n) => visitor.visit_i32(n),
                Scalar::I64(n) => visitor.visit_i64(n),
                Scalar::F64(x) => visitor.visit_f64(x),
            },
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_some(self)
    }

    /// `FieldsV1` (a newtype of a JSON value) is handed its JSON as serde_json reads it, so
    /// the JSON path's code serves both encodings.
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        if !matches!(self.kind, Kind::FieldsV1) {
            return visitor.visit_newtype_struct(self);
        }
        let raw = match wire::last(self.bytes()?, 1)? {
            Some(Value::Bytes(raw)) => raw,
            _ => b"{}",
        };
        let mut json = serde_json::Deserializer::from_slice(raw);
        visitor
            .visit_newtype_struct(&mut json)
            .map_err(|e| DecodeError::Invalid(format!("managed fields: {e}")))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_unit()
    }

    /// A string read into a Rust enum of unit variants (kube's `StatusSummary`), as
    /// serde_json reads one.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.kind {
            Kind::String => visitor.visit_enum(BorrowedStrDeserializer::new(utf8(self.bytes()?)?)),
            _ => self.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(bytes).map_err(|_| DecodeError::Malformed("a string that is not UTF-8"))
}

/// `seconds` since the Unix epoch as Go's `metav1.Time` writes it in JSON
/// (`2006-01-02T15:04:05Z`), or `metav1.MicroTime` with `micros`.
fn rfc3339(seconds: i64, micros: Option<i32>) -> Result<String, DecodeError> {
    // Go's times are of years 0001 to 9999.
    if !(-62_135_596_800..=253_402_300_799).contains(&seconds) {
        return Err(DecodeError::Malformed("a time outside years 1 to 9999"));
    }
    let nanos = micros.map_or(0, |us| us.clamp(0, 999_999) * 1000);
    let time = k8s_openapi::jiff::Timestamp::new(seconds, nanos)
        .map_err(|e| DecodeError::Invalid(format!("a time: {e}")))?;
    Ok(match micros {
        None => format!("{time:.0}"),
        Some(_) => format!("{time:.6}"),
    })
}

impl<'de> IntoDeserializer<'de, DecodeError> for MessageDe<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_go_writes_them() {
        assert_eq!(rfc3339(0, None).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(1_796_587_912, None).unwrap(),
            "2026-12-06T20:11:52Z"
        );
        assert_eq!(rfc3339(951_782_400, None).unwrap(), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339(-62_135_596_800, None).unwrap(),
            "0001-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339(1_796_587_912, Some(1234)).unwrap(),
            "2026-12-06T20:11:52.001234Z"
        );
        assert!(rfc3339(i64::MAX, None).is_err());
    }
}
