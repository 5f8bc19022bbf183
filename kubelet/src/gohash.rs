//! The checksums of the kubelet's checkpoint files: FNV-1a 32 (Go's `hash/fnv` `New32a`) over
//! Go's `dump.ForHash` print (go-spew `%#v`, keys sorted, no pointer addresses) of the
//! checkpoint struct with a zero checksum, or of the `data` string for the versions with a
//! `data` payload (CPU manager v4, memory manager v3).

use std::collections::BTreeMap;

/// FNV-1a, 32 bits.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The `dataChecksum` of a `data` payload: FNV-1a 32 over the print `(string)<data>`.
pub fn data_checksum(data: &str) -> u32 {
    fnv32a(format!("(string){data}").as_bytes())
}

/// Go's print of a `map[string]map[string]string` value inside a struct (sorted keys,
/// elements without their type; `None` is a nil map, printed `<nil>`).
pub fn go_print_string_maps(m: Option<&BTreeMap<String, BTreeMap<String, String>>>) -> String {
    let Some(m) = m else {
        return "<nil>".to_string();
    };
    let outer: Vec<String> = m
        .iter()
        .map(|(k, inner)| {
            let inner: Vec<String> = inner.iter().map(|(c, s)| format!("{c}:{s}")).collect();
            format!("{k}:map[{}]", inner.join(" "))
        })
        .collect();
    format!("map[{}]", outer.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv32a_matches_the_reference_values() {
        // The FNV reference vectors (offset basis for "", "a", "foobar").
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn maps_print_sorted_and_nil_apart_from_empty() {
        let mut m = BTreeMap::new();
        m.insert(
            "b".to_string(),
            BTreeMap::from([("c".to_string(), "1".to_string())]),
        );
        m.insert("a".to_string(), BTreeMap::new());
        assert_eq!(go_print_string_maps(Some(&m)), "map[a:map[] b:map[c:1]]");
        assert_eq!(go_print_string_maps(Some(&BTreeMap::new())), "map[]");
        assert_eq!(go_print_string_maps(None), "<nil>");
    }
}
