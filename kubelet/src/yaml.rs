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
/// The most values a document may expand to through aliases (a bound on memory besides
/// go-yaml's aliasing rule below).
const MAX_VALUES: usize = 1_000_000;
/// The most scalar bytes a document may expand to through aliases. go-yaml shares a Go
/// string between the places an alias puts it, so it has no such bound; a copy here would
/// let a small file with a long anchored string aliased many times fill memory. No real
/// configuration comes near it (the files are at most 1 MiB).
const MAX_EXPANDED_BYTES: usize = 64 << 20;
/// go-yaml v2's aliasing rule (`decoder.unmarshal`): every node decoded counts, nodes
/// decoded through an alias count as aliased too, and once more than 100 aliased of more
/// than 1000 decoded make a share above [`allowed_alias_ratio`] the document is refused
/// with "document contains excessive aliasing". The kubelet decodes its files with it.
const ALIAS_RATIO_RANGE_LOW: usize = 400_000;
const ALIAS_RATIO_RANGE_HIGH: usize = 4_000_000;

/// go-yaml v2's `allowedAliasRatio`: 99 % of the decoded nodes may come from aliases in
/// documents up to 400,000 decoded nodes, 10 % from 4,000,000 on, linear in between.
fn allowed_alias_ratio(decoded: usize) -> f64 {
    if decoded <= ALIAS_RATIO_RANGE_LOW {
        0.99
    } else if decoded >= ALIAS_RATIO_RANGE_HIGH {
        0.10
    } else {
        let range = (ALIAS_RATIO_RANGE_HIGH - ALIAS_RATIO_RANGE_LOW) as f64;
        0.99 - 0.89 * ((decoded - ALIAS_RATIO_RANGE_LOW) as f64 / range)
    }
}

/// The first document of `text` as JSON (`null` when there is none).
pub fn to_json(text: &str, keys: Keys) -> Result<J, YamlError> {
    let mut r = Reader {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        keys,
        values: 0,
        bytes: 0,
        decoded: 0,
        aliased: 0,
    };
    loop {
        let (ev, at) = r.parser.next_token()?;
        match ev {
            Event::StreamStart => {}
            Event::StreamEnd => return Ok(J::Null),
            Event::DocumentStart => {
                // go-yaml decodes the document node itself too.
                r.decode(&Cost::ONE, false, &at)?;
                let (ev, at) = r.parser.next_token()?;
                return Ok(r.node(ev, &at, 0, true)?.0);
            }
            other => return Err(error(&at, format!("unexpected {other:?}"))),
        }
    }
}

/// What decoding a node (again, through an alias) costs: go-yaml's decode operations, the
/// JSON values it makes and their scalar bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    decoded: usize,
    values: usize,
    bytes: usize,
}

impl Cost {
    const ONE: Cost = Cost {
        decoded: 1,
        values: 0,
        bytes: 0,
    };

    fn add(&mut self, o: Cost) {
        self.decoded += o.decoded;
        self.values += o.values;
        self.bytes += o.bytes;
    }
}

struct Reader<'a> {
    parser: Parser<std::str::Chars<'a>>,
    /// Each anchor's value and what decoding it costs.
    anchors: HashMap<usize, (J, Cost)>,
    keys: Keys,
    values: usize,
    bytes: usize,
    /// go-yaml's `decodeCount` and `aliasCount`.
    decoded: usize,
    aliased: usize,
}

impl Reader<'_> {
    /// Counts `c` (decoded through an alias when `aliased`), failing as go-yaml does on
    /// excessive aliasing, or on this reader's memory bounds. Within an alias both counts
    /// grow together, so the share only rises while the allowed share only falls: checking
    /// once after the whole expansion finds what go-yaml's check per node finds.
    fn decode(&mut self, c: &Cost, aliased: bool, at: &Marker) -> Result<(), YamlError> {
        self.decoded += c.decoded;
        if aliased {
            self.aliased += c.decoded;
        }
        if self.aliased > 100
            && self.decoded > 1000
            && self.aliased as f64 / self.decoded as f64 > allowed_alias_ratio(self.decoded)
        {
            return Err(error(at, "document contains excessive aliasing"));
        }
        self.values += c.values;
        self.bytes += c.bytes;
        if self.values > MAX_VALUES {
            return Err(error(
                at,
                format!(
                    "the document expands to more than {MAX_VALUES} values (excessive aliasing)"
                ),
            ));
        }
        if self.bytes > MAX_EXPANDED_BYTES {
            return Err(error(
                at,
                format!(
                    "the document expands to more than {} MiB of text through aliases (excessive aliasing)",
                    MAX_EXPANDED_BYTES >> 20
                ),
            ));
        }
        Ok(())
    }

    fn anchor(&mut self, id: usize, v: &J, c: Cost) {
        if id > 0 {
            self.anchors.insert(id, (v.clone(), c));
        }
    }

    /// One node and what decoding it cost. `counted`: go-yaml decodes the node itself (not
    /// so for the sequence after a merge key `<<`, whose items it decodes one by one).
    fn node(
        &mut self,
        ev: Event,
        at: &Marker,
        depth: usize,
        counted: bool,
    ) -> Result<(J, Cost), YamlError> {
        if depth > MAX_DEPTH {
            return Err(error(at, format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let mut cost = Cost {
            decoded: usize::from(counted),
            values: 1,
            bytes: 0,
        };
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                cost.bytes = text.len();
                self.decode(&cost, false, at)?;
                let v = scalar(&text, style, tag.as_ref()).map_err(|what| error(at, what))?;
                self.anchor(anchor, &v, cost);
                Ok((v, cost))
            }
            Event::Alias(id) => {
                let Some((v, inner)) = self.anchors.get(&id).cloned() else {
                    return Err(error(at, "an alias to an unknown anchor"));
                };
                // The alias node, then the anchored node decoded again through it.
                self.decode(&Cost::ONE, false, at)?;
                self.decode(&inner, true, at)?;
                let mut total = Cost::ONE;
                total.add(inner);
                Ok((v, total))
            }
            Event::SequenceStart(anchor, _) => {
                self.decode(&cost, false, at)?;
                let mut items = Vec::new();
                loop {
                    let (ev, at) = self.parser.next_token()?;
                    if ev == Event::SequenceEnd {
                        break;
                    }
                    let (v, c) = self.node(ev, &at, depth + 1, true)?;
                    cost.add(c);
                    items.push(v);
                }
                let v = J::Array(items);
                self.anchor(anchor, &v, cost);
                Ok((v, cost))
            }
            Event::MappingStart(anchor, _) => {
                self.decode(&cost, false, at)?;
                let mut map = Map::new();
                loop {
                    let (key_ev, key_at) = self.parser.next_token()?;
                    if key_ev == Event::MappingEnd {
                        break;
                    }
                    let merge = matches!(&key_ev, Event::Scalar(k, TScalarStyle::Plain, _, None) if k == "<<");
                    // go-yaml does not decode a merge key, only its value.
                    let key = if merge {
                        None
                    } else {
                        let (k, c) = self.node(key_ev, &key_at, depth + 1, true)?;
                        cost.add(c);
                        Some(k)
                    };
                    let (ev, at) = self.parser.next_token()?;
                    let counted = !(merge && matches!(ev, Event::SequenceStart(..)));
                    let (value, c) = self.node(ev, &at, depth + 1, counted)?;
                    cost.add(c);
                    match key {
                        None => self.merge(&mut map, value, &key_at)?,
                        Some(key) => {
                            let key = key_string(&key).map_err(|what| error(&key_at, what))?;
                            self.set(&mut map, key, value, &key_at)?;
                        }
                    }
                }
                let v = J::Object(map);
                self.anchor(anchor, &v, cost);
                Ok((v, cost))
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
        // A billion laughs (1.4 KB) stops at go-yaml's aliasing rule, as in the kubelet,
        // a few thousand values in (it used to expand to a million values first).
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let e = to_json(&doc, Keys::LastWins).unwrap_err();
        assert_eq!(e.what, "document contains excessive aliasing");
        // On its fourth line: the third alias of a2 makes 4,983 of 5,026 nodes aliased.
        assert_eq!(e.line, 4, "{e}");
        let deep = "[".repeat(MAX_DEPTH + 5) + &"]".repeat(MAX_DEPTH + 5);
        assert!(to_json(&deep, Keys::LastWins).is_err());
    }

    /// go-yaml v2's counts: 100 aliases of a 9-item sequence are 1,000 aliased nodes of
    /// 1,116 decoded (90 %), read; 1,000 aliases of a 99-item sequence are 100,000 of
    /// 101,105 (98.9 %), read; of a 200-item sequence 201,000 of 202,207 (99.4 %), refused. (Checked against the kubelet's own
    /// loading in `cli/tests/kubelet_config_oracle.rs`, `aliasing_limits_agree_with_the_kubelet`.)
    #[test]
    fn aliasing_follows_go_yaml() {
        let doc = |size: usize, count: usize| {
            format!(
                "a: &a [{}]\nb: [{}]\n",
                vec!["x"; size].join(", "),
                vec!["*a"; count].join(", ")
            )
        };
        assert!(to_json(&doc(9, 100), Keys::LastWins).is_ok());
        assert!(to_json(&doc(99, 1000), Keys::LastWins).is_ok());
        let e = to_json(&doc(200, 1000), Keys::LastWins).unwrap_err();
        assert_eq!(e.what, "document contains excessive aliasing");
        // Merge keys count their values, not the `<<` key or a merged list itself.
        let merged = "m: &m {a: 1}\nl:\n".to_string() + &"- {<<: [*m, *m]}\n".repeat(300);
        assert!(to_json(&merged, Keys::LastWins).is_ok());
        // A long string aliased many times: go-yaml shares it (allowed), a copy here is
        // bounded by the expanded text.
        let long = format!(
            "s: &s {}\nl: [{}]\n",
            "x".repeat(100_000),
            vec!["*s"; 1000].join(", ")
        );
        let e = to_json(&long, Keys::LastWins).unwrap_err();
        assert!(e.what.contains("MiB of text through aliases"), "{e}");
    }
}
