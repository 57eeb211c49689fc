//! Protobuf's wire format, read: a message is a sequence of fields, each a key (field
//! number and wire type) and a value.

use super::DecodeError;

/// One field's value as it is on the wire.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: a string, bytes, a message or packed scalars.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// Reads a varint from the front of `buf`.
pub(crate) fn varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or(DecodeError::Truncated)?;
        *buf = rest;
        n |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(DecodeError::Malformed("a varint longer than 10 bytes"))
}

/// The fields of a message, in wire order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fields<'a>(pub(crate) &'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let item = next_field(&mut self.0);
        if item.is_err() {
            self.0 = &[]; // no field after a malformed one
        }
        Some(item)
    }
}

/// The fields of a message, in wire order, each with its whole encoding (key and value) as
/// it is in `message`: what an edit copies unchanged.
pub(crate) fn spans(
    message: &[u8],
) -> impl Iterator<Item = Result<(u32, Value<'_>, &[u8]), DecodeError>> {
    let mut rest = message;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let start = rest;
        let item = next_field(&mut rest).map(|(n, value)| {
            let raw = &start[..start.len() - rest.len()];
            (n, value, raw)
        });
        if item.is_err() {
            rest = &[];
        }
        Some(item)
    })
}

fn next_field<'a>(buf: &mut &'a [u8]) -> Result<(u32, Value<'a>), DecodeError> {
    let key = varint(buf)?;
    let number = u32::try_from(key >> 3).map_err(|_| DecodeError::Malformed("a field number"))?;
    let value = match key & 7 {
        0 => Value::Varint(varint(buf)?),
        1 => {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(take(buf, 8)?);
            Value::Fixed64(u64::from_le_bytes(bytes))
        }
        2 => {
            let len = usize::try_from(varint(buf)?).map_err(|_| DecodeError::Truncated)?;
            Value::Bytes(take(buf, len)?)
        }
        5 => {
            let mut bytes = [0; 4];
            bytes.copy_from_slice(take(buf, 4)?);
            Value::Fixed32(u32::from_le_bytes(bytes))
        }
        _ => return Err(DecodeError::Malformed("a wire type")),
    };
    Ok((number, value))
}

fn take<'a>(buf: &mut &'a [u8], len: usize) -> Result<&'a [u8], DecodeError> {
    if buf.len() < len {
        return Err(DecodeError::Truncated);
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

/// The last value of field `number` in `message` (protobuf's rule for a field that is not
/// repeated), if it is there.
pub(crate) fn last(message: &[u8], number: u32) -> Result<Option<Value<'_>>, DecodeError> {
    let mut found = None;
    for field in Fields(message) {
        let (n, value) = field?;
        if n == number {
            found = Some(value);
        }
    }
    Ok(found)
}

/// Appends a varint to `out`.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Appends a length-delimited field (string, bytes, message) to `out`.
pub(crate) fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_varint(out, u64::from(number) << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_a_short_one_is_truncated() {
        for n in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, n);
            let mut buf = out.as_slice();
            assert_eq!(varint(&mut buf).unwrap(), n);
            assert!(buf.is_empty());
        }
        assert!(matches!(
            varint(&mut &[0x80u8][..]),
            Err(DecodeError::Truncated)
        ));
        assert!(matches!(
            varint(&mut &[0xffu8; 11][..]),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn fields_come_in_wire_order_and_the_last_of_a_number_wins() {
        let mut msg = Vec::new();
        put_bytes(&mut msg, 1, b"a");
        put_varint(&mut msg, 2 << 3);
        put_varint(&mut msg, 7);
        put_bytes(&mut msg, 1, b"b");
        let numbers: Vec<u32> = Fields(&msg).map(|f| f.unwrap().0).collect();
        assert_eq!(numbers, [1, 2, 1]);
        assert!(matches!(last(&msg, 1).unwrap(), Some(Value::Bytes(b"b"))));
        assert!(matches!(last(&msg, 2).unwrap(), Some(Value::Varint(7))));
        assert!(last(&msg, 3).unwrap().is_none());
        // a length past the end
        assert!(Fields(&[0x0a, 0x05, b'x']).next().unwrap().is_err());
    }
}
