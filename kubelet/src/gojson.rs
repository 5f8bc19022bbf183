//! JSON as Go's `encoding/json` reads and writes it, for the kubelet's checkpoint files.
//!
//! Reading a JSON object into a Go struct differs from serde's derive in ways a checkpoint
//! reader must follow to agree with the kubelet on every file:
//! - the whole text is checked first; nesting deeper than 10,000 (`maxNestingDepth`) is
//!   refused with "exceeded max depth", however shallow the fields read;
//! - an object key names a field exactly or, failing that, case-insensitively
//!   (`bytes.EqualFold`); keys naming no field are skipped, whatever they hold;
//! - a repeated key is decoded again into the same field: a scalar takes the last value, a
//!   map keeps its entries and gains the new ones (Go reuses a non-nil map), `null` leaves a
//!   string or number as it was and makes a map nil;
//! - a value of the wrong type is an error, but decoding goes on (the fields after it are
//!   still set, which decides whether the kubelet falls back to an older version).
//!
//! [`GoObject`] gives the fields of one object in that manner; [`go_json_string`] writes a
//! string literal as Go does.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::Deserializer as _;
use serde_json::value::RawValue;

/// Go's `encoding/json` nesting limit (`maxNestingDepth`).
pub const GO_MAX_DEPTH: usize = 10_000;

/// The bytes of `text` that stand outside JSON strings (the quotes themselves included):
/// the structure both counters below read.
fn outside_strings(text: &str) -> impl Iterator<Item = u8> + '_ {
    let mut in_string = false;
    let mut escaped = false;
    text.bytes().filter(move |&b| {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            return false;
        }
        if b == b'"' {
            in_string = true;
        }
        true
    })
}

/// Refuses text nested deeper than Go's limit (arrays and objects, outside strings).
pub fn check_depth(text: &str) -> Result<(), String> {
    let mut depth = 0usize;
    for b in outside_strings(text) {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > GO_MAX_DEPTH {
                    return Err("exceeded max depth".into());
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The number of object members (`:` outside strings) in `text`, counted without
/// allocating: a bound on the maps a decode of it builds.
pub fn count_members(text: &str) -> usize {
    outside_strings(text).filter(|&b| b == b':').count()
}

/// One JSON object's members in file order, each value kept as its text.
#[derive(Debug)]
pub struct GoObject {
    members: Vec<(String, Box<RawValue>)>,
}

struct Members;

impl<'de> Visitor<'de> for Members {
    type Value = Option<Vec<(String, Box<RawValue>)>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            out.push((k, map.next_value::<Box<RawValue>>()?));
        }
        Ok(Some(out))
    }
}

/// Go's `bytes.EqualFold` on field names (Unicode simple folding; the two non-ASCII letters
/// that fold to ASCII, U+017F and U+212A, included).
fn fold_eq(a: &str, b: &str) -> bool {
    fn fold(c: char) -> char {
        match c {
            '\u{017F}' => 's',
            '\u{212A}' => 'k',
            c => {
                let mut l = c.to_lowercase();
                match (l.next(), l.next()) {
                    (Some(x), None) => x,
                    _ => c,
                }
            }
        }
    }
    a.chars().count() == b.chars().count()
        && a.chars().zip(b.chars()).all(|(x, y)| fold(x) == fold(y))
}

impl GoObject {
    /// Parses `text` as one JSON value that must be an object (`null` reads as an empty
    /// object, as Go leaves the struct untouched); the depth limit applies to the whole text.
    pub fn parse(text: &str) -> Result<GoObject, String> {
        check_depth(text)?;
        let mut de = serde_json::Deserializer::from_str(text);
        let members = (&mut de)
            .deserialize_any(Members)
            .map_err(|e| e.to_string())?;
        de.end().map_err(|e| e.to_string())?;
        Ok(GoObject {
            members: members.unwrap_or_default(),
        })
    }

    /// Every member in file order (for decoding a JSON object into a Go map).
    pub fn members(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.members.iter().map(|(k, v)| (k.as_str(), v.as_ref()))
    }

    /// The values for the field `name`, in file order: keys equal to `name`, or, where no
    /// field of `fields` (the struct's field names) equals the key, keys equal to it
    /// case-insensitively.
    pub fn values<'a>(
        &'a self,
        name: &'a str,
        fields: &'a [&'a str],
    ) -> impl Iterator<Item = &'a RawValue> + 'a {
        self.members
            .iter()
            .filter(move |(k, _)| {
                k == name
                    || (!fields.contains(&k.as_str()) && fold_eq(k, name) && {
                        // The first field (in struct order) the key folds to takes it.
                        fields.iter().find(|f| fold_eq(k, f)) == Some(&name)
                    })
            })
            .map(|(_, v)| v.as_ref())
    }
}

/// Decodes a field as Go does into a scalar: the last non-null value wins; a value of the
/// wrong type is recorded in `errors` and leaves the field as it was.
pub fn scalar<T: DeserializeOwned>(
    obj: &GoObject,
    name: &str,
    fields: &[&str],
    slot: &mut T,
    errors: &mut Vec<String>,
) {
    for raw in obj.values(name, fields) {
        match serde_json::from_str::<Option<T>>(raw.get()) {
            Ok(Some(v)) => *slot = v,
            Ok(None) => {}
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
}

/// Decodes a field as Go does into a map that starts non-nil when `start_empty`: every
/// object adds its entries (a repeated key in one object: the last wins), `null` makes it
/// nil (`None`); a value of the wrong type is recorded in `errors`.
pub fn map<V: DeserializeOwned>(
    obj: &GoObject,
    name: &str,
    fields: &[&str],
    start_empty: bool,
    errors: &mut Vec<String>,
) -> Option<BTreeMap<String, V>> {
    let mut slot = start_empty.then(BTreeMap::new);
    for raw in obj.values(name, fields) {
        match serde_json::from_str::<Option<BTreeMap<String, V>>>(raw.get()) {
            Ok(Some(m)) => slot.get_or_insert_with(BTreeMap::new).extend(m),
            Ok(None) => slot = None,
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    slot
}

/// A JSON string literal as Go's `encoding/json` writes it (`<`, `>`, `&`, U+2028 and
/// U+2029 escaped).
pub fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", ch as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: &[&str] = &["policyName", "checksum", "entries"];

    #[test]
    fn depth_limit_is_gos() {
        let ok = format!("{}{}", "[".repeat(GO_MAX_DEPTH), "]".repeat(GO_MAX_DEPTH));
        assert!(check_depth(&ok).is_ok());
        let deep = format!("[{ok}]");
        assert_eq!(check_depth(&deep).unwrap_err(), "exceeded max depth");
        // Brackets inside strings do not count.
        assert!(check_depth(&format!("{{\"a\":\"{}\"}}", "[".repeat(20_000))).is_ok());
    }

    #[test]
    fn members_are_counted_outside_strings_only() {
        assert_eq!(count_members(r#"{"a":1,"b":{"c":[2]}}"#), 3);
        // Colons and escaped quotes inside strings are text, not structure.
        assert_eq!(count_members(r#"{"a:b":"x:\":y","c":"\\"}"#), 2);
        assert_eq!(count_members(""), 0);
        // An escaped quote does not end the string; the depth counter agrees.
        assert!(check_depth(r#"{"a":"\"[[[[","b":1}"#).is_ok());
    }

    #[test]
    fn a_deep_unknown_member_is_skipped_not_refused() {
        let deep = format!("{}1{}", "[".repeat(5_000), "]".repeat(5_000));
        let o = GoObject::parse(&format!("{{\"x\":{deep},\"policyName\":\"static\"}}")).unwrap();
        let mut p = String::new();
        scalar(&o, "policyName", F, &mut p, &mut Vec::new());
        assert_eq!(p, "static");
    }

    #[test]
    fn repeated_keys_last_scalar_wins_maps_merge_null_clears() {
        let o = GoObject::parse(
            r#"{"policyName":"a","POLICYNAME":"b","policyName":null,"entries":{"u":{"c":"1"}},"Entries":{"v":{}}}"#,
        )
        .unwrap();
        let mut p = String::new();
        let mut errs = Vec::new();
        scalar(&o, "policyName", F, &mut p, &mut errs);
        assert_eq!(p, "b");
        let m: Option<BTreeMap<String, BTreeMap<String, String>>> =
            map(&o, "entries", F, true, &mut errs);
        assert_eq!(m.unwrap().keys().collect::<Vec<_>>(), ["u", "v"]);
        let o = GoObject::parse(r#"{"entries":{"u":{}},"entries":null}"#).unwrap();
        let m: Option<BTreeMap<String, BTreeMap<String, String>>> =
            map(&o, "entries", F, true, &mut errs);
        assert!(m.is_none());
        assert!(errs.is_empty());
    }

    #[test]
    fn a_wrong_type_is_an_error_and_decoding_goes_on() {
        let o = GoObject::parse(r#"{"checksum":"x","policyName":"static"}"#).unwrap();
        let (mut c, mut p, mut errs) = (0u64, String::new(), Vec::new());
        scalar(&o, "checksum", F, &mut c, &mut errs);
        scalar(&o, "policyName", F, &mut p, &mut errs);
        assert_eq!((c, p.as_str(), errs.len()), (0, "static", 1));
    }

    #[test]
    fn null_is_an_empty_object_and_other_values_are_errors() {
        assert!(GoObject::parse("null").unwrap().members.is_empty());
        assert!(GoObject::parse("[]").is_err());
        assert!(GoObject::parse("{} x").is_err());
    }

    #[test]
    fn keys_fold_as_go() {
        assert!(fold_eq("POLICYname", "policyName"));
        assert!(fold_eq("\u{212A}ey", "key"));
        assert!(!fold_eq("policyNam", "policyName"));
    }

    #[test]
    fn go_escapes_html_characters() {
        assert_eq!(go_json_string("a<b>&"), "\"a\\u003cb\\u003e\\u0026\"");
    }
}
