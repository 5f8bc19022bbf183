//! A bound on what a PodResources answer may make the agent allocate (issue 26 point 10).
//!
//! Decoded, every length-delimited field of a protobuf message (a pod, a container, a
//! device, a string) becomes its own allocation of up to a few hundred bytes, so a few
//! bytes on the wire can cost a hundred times as much in memory: a 3.5 MB `List` answer of
//! 700,000 empty containers took 417 MB. [`check`] walks the wire bytes once, without
//! allocating, counting the length-delimited fields at every depth of the PodResources
//! messages, and refuses an answer with more than [`MAX_ELEMENTS`] before prost decodes
//! it. [`BoundedCodec`] is prost's codec with that check in front.

use std::marker::PhantomData;

use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::prost::bytes::Buf as _;
use tonic_prost::prost::Message;
use tonic_prost::ProstEncoder;

/// The most length-delimited fields (pods, containers, devices, device ids, memory blocks,
/// names, CPU id lists) one answer may hold: a node of 1,000 pods of 10 containers (about
/// 45,000) stays below it; decoded, an answer at the limit takes about 20 MB (about 200
/// bytes per field, measured).
pub const MAX_ELEMENTS: usize = 100_000;

/// The messages of the PodResources v1 API whose fields are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    /// `ListPodResourcesResponse`.
    List,
    /// `AllocatableResourcesResponse`.
    Allocatable,
    /// `PodResources`.
    Pod,
    /// `ContainerResources`.
    Container,
    /// `ContainerMemory`.
    Memory,
    /// `ContainerDevices`.
    Devices,
    /// `TopologyInfo`.
    Topology,
    /// `DynamicResource`.
    Dynamic,
    /// `ClaimResource`.
    Claim,
    /// A message whose fields are not looked into (a string, packed numbers, a leaf).
    Leaf,
}

impl Msg {
    /// The message type of field `field` of `self` (`Leaf` for strings and numbers).
    fn field(self, field: u64) -> Msg {
        match (self, field) {
            (Msg::List, 1) => Msg::Pod,
            (Msg::Allocatable, 1) => Msg::Devices,
            (Msg::Allocatable, 3) => Msg::Memory,
            (Msg::Pod, 3) => Msg::Container,
            (Msg::Pod, 5) => Msg::Memory,
            (Msg::Container, 2) => Msg::Devices,
            (Msg::Container, 4) => Msg::Memory,
            (Msg::Container, 5) => Msg::Dynamic,
            (Msg::Memory, 3) | (Msg::Devices, 3) => Msg::Topology,
            (Msg::Dynamic, 4) => Msg::Claim,
            _ => Msg::Leaf,
        }
    }
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&byte) = b.get(*i) else {
            return Err("truncated varint".into());
        };
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// Adds the length-delimited fields of message `msg` in `b` (and of its known submessages)
/// to `count`; stops with an error past `MAX_ELEMENTS` or on malformed bytes.
fn walk(b: &[u8], msg: Msg, count: &mut usize) -> Result<(), String> {
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        match key & 7 {
            0 => {
                varint(b, &mut i)?;
            }
            1 => i += 8,
            5 => i += 4,
            2 => {
                let len = usize::try_from(varint(b, &mut i)?).map_err(|_| "length overflow")?;
                let end = i
                    .checked_add(len)
                    .filter(|e| *e <= b.len())
                    .ok_or("a length past the end of the message")?;
                *count += 1;
                if *count > MAX_ELEMENTS {
                    return Err(format!(
                        "the answer holds more than {MAX_ELEMENTS} pods, containers, devices and names (the limit nodetopo decodes)"
                    ));
                }
                let sub = msg.field(key >> 3);
                if sub != Msg::Leaf {
                    walk(&b[i..end], sub, count)?;
                }
                i = end;
            }
            w => return Err(format!("wire type {w} is not used by the PodResources API")),
        }
    }
    if i > b.len() {
        return Err("a field past the end of the message".into());
    }
    Ok(())
}

/// Refuses the encoded message `b` of type `msg` when it holds more than [`MAX_ELEMENTS`]
/// length-delimited fields; returns how many it holds.
pub fn check(b: &[u8], msg: Msg) -> Result<usize, String> {
    let mut count = 0;
    walk(b, msg, &mut count)?;
    Ok(count)
}

/// prost's codec, with [`check`] run on each answer before it is decoded.
#[derive(Debug)]
pub struct BoundedCodec<T, U> {
    msg: Msg,
    _pd: PhantomData<(T, U)>,
}

impl<T, U> BoundedCodec<T, U> {
    /// For answers of type `msg`.
    pub fn new(msg: Msg) -> Self {
        BoundedCodec {
            msg,
            _pd: PhantomData,
        }
    }
}

/// The decoder of [`BoundedCodec`].
#[derive(Debug)]
pub struct BoundedDecoder<U> {
    msg: Msg,
    _pd: PhantomData<U>,
}

impl<U: Message + Default> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let bytes = buf.copy_to_bytes(buf.remaining());
        check(&bytes, self.msg).map_err(Status::resource_exhausted)?;
        U::decode(bytes)
            .map(Some)
            .map_err(|e| Status::internal(format!("decoding the answer: {e}")))
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder {
            msg: self.msg,
            _pd: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::v1;
    use super::*;

    fn list(pods: usize, containers: usize) -> Vec<u8> {
        let pod = v1::PodResources {
            name: "p".into(),
            namespace: "n".into(),
            containers: (0..containers)
                .map(|_| v1::ContainerResources {
                    name: "c".into(),
                    cpu_ids: vec![1],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        v1::ListPodResourcesResponse {
            pod_resources: vec![pod; pods],
        }
        .encode_to_vec()
    }

    #[test]
    fn answers_are_counted_before_decoding_and_refused_past_the_limit() {
        // A pod, its name, namespace, and per container itself, its name and its CPU ids.
        assert_eq!(check(&list(2, 3), Msg::List).unwrap(), 2 * (3 + 3 * 3));
        let big = list(1, MAX_ELEMENTS / 3 + 1);
        let e = check(&big, Msg::List).unwrap_err();
        assert!(e.contains("more than 100000"), "{e}");
        // Malformed bytes are an error, not a panic or a loop.
        assert!(check(&[0x0a, 0x05, 0x01], Msg::List).is_err());
        assert!(check(&[0x0b], Msg::List).is_err());
        assert!(check(&[0xff; 11], Msg::List).is_err());
        let alloc = v1::AllocatableResourcesResponse {
            devices: vec![v1::ContainerDevices {
                resource_name: "r".into(),
                device_ids: vec!["a".into(), "b".into()],
                topology: Some(v1::TopologyInfo {
                    nodes: vec![v1::NumaNode { id: 0 }],
                }),
            }],
            cpu_ids: vec![0, 1],
            ..Default::default()
        }
        .encode_to_vec();
        // devices, its name, two ids, the topology, its node, the packed CPU ids.
        assert_eq!(check(&alloc, Msg::Allocatable).unwrap(), 7);
    }
}
