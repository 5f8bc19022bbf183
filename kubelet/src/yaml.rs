//! YAML read as the kubelet reads its configuration files, into the JSON the kubelet decodes
//! and merges. The kubelet turns YAML into JSON with sigs.k8s.io/yaml over go-yaml v2
//! (`go.yaml.in/yaml/v2`), which is YAML 1.1 where it matters here:
//! - a plain (unquoted, untagged) scalar resolves by YAML 1.1: `y`, `yes`, `on` (any of
//!   their three spellings) are `true`, `n`, `no`, `off` are `false`, `~` and an empty value
//!   are null, numbers may have `_`, a `0x`/`0o`/`0b` prefix or a leading `0` (octal);
//!   quoted and block scalars are strings, `!!str` forces a string;
//! - `<<` merges mappings (YAML 1.1 merge keys), in order, over keys set before it;
//! - only the first document of a file is read;
//! - map keys become JSON strings (`true`, `1`), and a key set twice either wins last (the
//!   kubelet's lenient decoding of its `--config` file) or is an error (go-yaml's strict
//!   decoding, which the drop-ins get).
//!
//! So `featureGates: {CPUManagerPolicyBetaOptions: yes}` turns the gate on, and
//! `cpuManagerPolicyOptions: {full-pcpus-only: yes}` is a boolean the kubelet refuses where
//! it wants a string. Checked against the kubelet's own loading by the configuration oracle
//! (`cli/tests/kubelet_config_oracle.rs`). Plain timestamps stay strings: go-yaml v2 makes
//! them time values that sigs.k8s.io/yaml writes back as RFC 3339 strings, so only their
//! spelling differs, and no field read here is a time.

use std::collections::HashMap;

use serde_json::{Map, Number, Value as J};
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

/// What a key given twice in one map does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// The later value wins (the kubelet's lenient decoding of its `--config` file).
    LastWins,
    /// An error (go-yaml's strict decoding, as for the drop-ins).
    Unique,
}

/// A file the kubelet could not read as YAML, with the place.
#[derive(Debug, thiserror::Error)]
#[error("line {line}, column {column}: {what}")]
pub struct YamlError {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
    /// What is wrong there.
    pub what: String,
}

fn error(at: &Marker, what: impl Into<String>) -> YamlError {
    YamlError {
        line: at.line(),
        column: at.col() + 1,
        what: what.into(),
    }
}

impl From<ScanError> for YamlError {
    fn from(e: ScanError) -> Self {
        error(e.marker(), e.info())
    }
}

/// The deepest nesting read: a bound on the recursion, far beyond any configuration.
const MAX_DEPTH: usize = 256;
/// The most values a document may expand to through aliases (a billion-laughs document
/// stops here instead of filling memory).
const MAX_VALUES: usize = 1_000_000;

/// The first document of `text` as JSON (`null` when there is none).
pub fn to_json(text: &str, keys: Keys) -> Result<J, YamlError> {
    let mut r = Reader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        keys,
        values: 0,
    };
    loop {
        let (ev, at) = r.parser.next_token()?;
        match ev {
            Event::StreamStart => {}
            Event::StreamEnd => return Ok(J::Null),
            Event::DocumentStart => {
                let (ev, at) = r.parser.next_token()?;
                return r.node(ev, &at, 0);
            }
            other => return Err(error(&at, format!("unexpected {other:?}"))),
        }
    }
}

struct Reader<'a> {
    parser: Parser<std::str::Chars<'a>>,
    /// Each anchor's value and how many values it holds.
    anchors: HashMap<usize, (J, usize)>,
    keys: Keys,
    values: usize,
}

fn size(v: &J) -> usize {
    match v {
        J::Array(a) => 1 + a.iter().map(size).sum::<usize>(),
        J::Object(m) => 1 + m.values().map(size).sum::<usize>(),
        _ => 1,
    }
}

impl Reader<'_> {
    fn count(&mut self, n: usize, at: &Marker) -> Result<(), YamlError> {
        self.values += n;
        if self.values > MAX_VALUES {
            return Err(error(
                at,
                format!(
                    "the document expands to more than {MAX_VALUES} values (excessive aliasing)"
                ),
            ));
        }
        Ok(())
    }

    fn anchor(&mut self, id: usize, v: &J) {
        if id > 0 {
            self.anchors.insert(id, (v.clone(), size(v)));
        }
    }

    fn node(&mut self, ev: Event, at: &Marker, depth: usize) -> Result<J, YamlError> {
        if depth > MAX_DEPTH {
            return Err(error(at, format!("nested deeper than {MAX_DEPTH} levels")));
        }
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                self.count(1, at)?;
                let v = scalar(&text, style, tag.as_ref()).map_err(|what| error(at, what))?;
                self.anchor(anchor, &v);
                Ok(v)
            }
            Event::Alias(id) => {
                let Some((v, n)) = self.anchors.get(&id).cloned() else {
                    return Err(error(at, "an alias to an unknown anchor"));
                };
                self.count(n, at)?;
                Ok(v)
            }
            Event::SequenceStart(anchor, _) => {
                self.count(1, at)?;
                let mut items = Vec::new();
                loop {
                    let (ev, at) = self.parser.next_token()?;
                    if ev == Event::SequenceEnd {
                        break;
                    }
                    items.push(self.node(ev, &at, depth + 1)?);
                }
                let v = J::Array(items);
                self.anchor(anchor, &v);
                Ok(v)
            }
            Event::MappingStart(anchor, _) => {
                self.count(1, at)?;
                let mut map = Map::new();
                loop {
                    let (key_ev, key_at) = self.parser.next_token()?;
                    if key_ev == Event::MappingEnd {
                        break;
                    }
                    let merge = matches!(&key_ev, Event::Scalar(k, TScalarStyle::Plain, _, None) if k == "<<");
                    let key = self.node(key_ev, &key_at, depth + 1)?;
                    let (ev, at) = self.parser.next_token()?;
                    let value = self.node(ev, &at, depth + 1)?;
                    if merge {
                        self.merge(&mut map, value, &key_at)?;
                    } else {
                        let key = key_string(&key).map_err(|what| error(&key_at, what))?;
                        self.set(&mut map, key, value, &key_at)?;
                    }
                }
                let v = J::Object(map);
                self.anchor(anchor, &v);
                Ok(v)
            }
            other => Err(error(at, format!("unexpected {other:?}"))),
        }
    }

    fn set(
        &self,
        map: &mut Map<String, J>,
        key: String,
        v: J,
        at: &Marker,
    ) -> Result<(), YamlError> {
        if self.keys == Keys::Unique && map.contains_key(&key) {
            return Err(error(at, format!("key {key:?} already set in map")));
        }
        map.insert(key, v);
        Ok(())
    }

    /// `<<: map` or `<<: [map, ...]`: the keys of each map set in `map`, the first map of a
    /// list winning (go-yaml v2 merges the list from its end).
    fn merge(&self, map: &mut Map<String, J>, value: J, at: &Marker) -> Result<(), YamlError> {
        let maps = match value {
            J::Object(m) => vec![m],
            J::Array(items) => items
                .into_iter()
                .rev()
                .map(|item| match item {
                    J::Object(m) => Ok(m),
                    _ => Err(error(
                        at,
                        "map merge requires map or sequence of maps as the value",
                    )),
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(error(
                    at,
                    "map merge requires map or sequence of maps as the value",
                ))
            }
        };
        for m in maps {
            for (k, v) in m {
                self.set(map, k, v, at)?;
            }
        }
        Ok(())
    }
}

/// A map key as JSON writes it (sigs.k8s.io/yaml: strings as they are, numbers in decimal,
/// booleans as `true`/`false`; other keys are refused).
fn key_string(key: &J) -> Result<String, String> {
    match key {
        J::String(s) => Ok(s.clone()),
        J::Bool(b) => Ok(b.to_string()),
        J::Number(n) => Ok(match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            // go formats float keys with 32-bit precision.
            (_, _, Some(f)) => (f as f32).to_string(),
            _ => n.to_string(),
        }),
        J::Null => Err("a null map key is not supported".into()),
        J::Array(_) | J::Object(_) => Err("a sequence or map as a map key is not supported".into()),
    }
}

/// go-yaml's long prefix of the standard tags (`!!str` is `tag:yaml.org,2002:str`).
const STANDARD_TAG: &str = "tag:yaml.org,2002:";

fn scalar(text: &str, style: TScalarStyle, tag: Option<&Tag>) -> Result<J, String> {
    let Some(tag) = tag else {
        return match style {
            TScalarStyle::Plain => resolve(text),
            _ => Ok(J::String(text.to_string())),
        };
    };
    let want = if tag.handle == STANDARD_TAG {
        tag.suffix.as_str()
    } else {
        // A tag of one's own: go-yaml keeps the text.
        return Ok(J::String(text.to_string()));
    };
    let kind = |v: &J| match v {
        J::Null => "null",
        J::Bool(_) => "bool",
        J::Number(n) if n.is_f64() => "float",
        J::Number(_) => "int",
        _ => "str",
    };
    match want {
        "str" => Ok(J::String(text.to_string())),
        "bool" | "int" | "float" | "null" => {
            let v = resolve(text)?;
            match (kind(&v), want) {
                (got, want) if got == want => Ok(v),
                ("int", "float") => number(v.as_f64().unwrap_or_default()),
                (got, _) => Err(format!("cannot decode !!{got} `{text}` as a !!{want}")),
            }
        }
        "binary" => Err("!!binary values are not supported".into()),
        // !!map, !!seq or !!timestamp on a scalar: go-yaml keeps the text.
        _ => Ok(J::String(text.to_string())),
    }
}

fn number(f: f64) -> Result<J, String> {
    Number::from_f64(f)
        .map(J::Number)
        .ok_or_else(|| format!("{f} cannot be written as JSON"))
}

/// A plain scalar resolved by go-yaml v2's rules (YAML 1.1).
fn resolve(text: &str) -> Result<J, String> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Ok(J::Bool(true))
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Ok(J::Bool(false))
        }
        "" | "~" | "null" | "Null" | "NULL" => return Ok(J::Null),
        ".nan" | ".NaN" | ".NAN" | ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF"
        | "-.inf" | "-.Inf" | "-.INF" => return Err(format!("{text} cannot be written as JSON")),
        _ => {}
    }
    match text.as_bytes()[0] {
        b'.' if yaml_float(text) => {
            return number(text.parse::<f64>().map_err(|e| format!("{text}: {e}"))?);
        }
        b'+' | b'-' | b'0'..=b'9' => {
            let plain: String = text.chars().filter(|&c| c != '_').collect();
            if let Some(v) = go_int(&plain) {
                if let Ok(i) = i64::try_from(v) {
                    return Ok(J::Number(i.into()));
                }
                if let (Ok(u), false) = (u64::try_from(v), plain.starts_with('+')) {
                    return Ok(J::Number(u.into()));
                }
            }
            if yaml_float(&plain) {
                return number(plain.parse::<f64>().map_err(|e| format!("{text}: {e}"))?);
            }
        }
        _ => {}
    }
    Ok(J::String(text.to_string()))
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`, go-yaml's float.
fn yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// Go's `strconv.ParseInt(s, 0, ...)` over a wide range: a sign, then `0x`, `0o`, `0b`
/// (either case) or a leading `0` (octal), else decimal.
fn go_int(s: &str) -> Option<i128> {
    let (negative, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i128::from_str_radix(digits, radix).ok()?;
    if v > i128::from(u64::MAX) {
        return None;
    }
    Some(if negative { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lenient(text: &str) -> J {
        to_json(text, Keys::LastWins).unwrap()
    }

    #[test]
    fn plain_scalars_resolve_as_yaml_1_1() {
        let v = lenient(
            "a: yes\nb: On\nc: n\nd: OFF\ne: 'yes'\nf: \"on\"\ng: ~\nh:\ni: 0x1F\nj: 017\nk: 08\nl: 1_000\nm: 0b101\nnn: -0b11\no: .5\np: 1e3\nq: 0-3\nr: 2,34\ns: !!str 12\nt: !!float 1\nu: |\n  yes\nv: True\nw: +7\nx: 18446744073709551615\n",
        );
        assert_eq!(
            v,
            json!({"a": true, "b": true, "c": false, "d": false, "e": "yes", "f": "on", "g": null,
                   "h": null, "i": 31, "j": 15, "k": 8.0, "l": 1000, "m": 5, "nn": -3, "o": 0.5,
                   "p": 1000.0, "q": "0-3", "r": "2,34", "s": "12", "t": 1.0, "u": "yes\n",
                   "v": true, "w": 7, "x": 18446744073709551615u64})
        );
    }

    #[test]
    fn keys_become_strings_and_duplicates_follow_the_mode() {
        assert_eq!(
            lenient("on: 1\n5: 2\nx: 1\nx: 2\n"),
            json!({"true": 1, "5": 2, "x": 2})
        );
        let e = to_json("a: 1\nb:\n  x: 1\n  x: 2\n", Keys::Unique).unwrap_err();
        assert_eq!(
            (e.line, e.what.as_str()),
            (4, "key \"x\" already set in map")
        );
        assert!(to_json("~: 1\n", Keys::LastWins).is_err());
    }

    #[test]
    fn merge_keys_anchors_and_documents() {
        assert_eq!(
            lenient(
                "base: &b {p: static, s: pod}\nlist: [*b]\n<<: *b\ns: container\n---\np: none\n"
            ),
            json!({"base": {"p": "static", "s": "pod"}, "list": [{"p": "static", "s": "pod"}],
                   "p": "static", "s": "container"})
        );
        // Merged over keys set before it; the first map of a list wins.
        assert_eq!(
            lenient("s: pod\n<<: [{s: a}, {s: b, t: c}]\n"),
            json!({"s": "a", "t": "c"})
        );
        // Strict: a merged key already set is a duplicate.
        assert!(to_json("s: pod\n<<: {s: a}\n", Keys::Unique).is_err());
        assert!(to_json("<<: 5\n", Keys::LastWins).is_err());
        assert_eq!(lenient("# nothing\n"), J::Null);
        assert_eq!(lenient(""), J::Null);
    }

    #[test]
    fn bad_documents_are_errors_with_a_place() {
        for (text, want) in [
            ("a: [1, 2\n", "line"),
            ("a: *nowhere\n", "unknown anchor"),
            ("a: !!int abc\n", "cannot decode !!str `abc` as a !!int"),
            ("a: .inf\n", "cannot be written as JSON"),
        ] {
            let e = to_json(text, Keys::LastWins).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
        // A billion laughs stops at the value budget.
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let e = to_json(&doc, Keys::LastWins).unwrap_err();
        assert!(e.what.contains("excessive aliasing"), "{e}");
        let deep = "[".repeat(MAX_DEPTH + 5) + &"]".repeat(MAX_DEPTH + 5);
        assert!(to_json(&deep, Keys::LastWins).is_err());
    }
}
