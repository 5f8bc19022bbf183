//! CEL rules and messages written at compile time from the engine's option tables: a
//! fixed-capacity text buffer and `const fn`s that spell each rule the same way the CRDs
//! always have.

use crate::options::{OptionKind, PolicyOption};

/// Capacity of one generated text; exceeding it fails the build.
const CAP: usize = 1024;

/// A text assembled in a `const` context.
#[derive(Clone, Copy)]
pub struct Text {
    buf: [u8; CAP],
    len: usize,
}

impl Text {
    const fn new() -> Self {
        Text {
            buf: [0; CAP],
            len: 0,
        }
    }

    const fn push(mut self, s: &str) -> Self {
        let b = s.as_bytes();
        assert!(self.len + b.len() <= CAP, "generated CEL text too long");
        let mut i = 0;
        while i < b.len() {
            self.buf[self.len] = b[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    /// Appends a decimal number.
    const fn push_u32(mut self, n: u32) -> Self {
        let mut digits = [0u8; 10];
        let mut k = 0;
        let mut v = n;
        loop {
            digits[k] = b'0' + (v % 10) as u8;
            k += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        assert!(self.len + k <= CAP, "generated CEL text too long");
        while k > 0 {
            k -= 1;
            self.buf[self.len] = digits[k];
            self.len += 1;
        }
        self
    }
}

/// The text as a string.
pub const fn text(t: &'static Text) -> &'static str {
    let (head, _) = t.buf.split_at(t.len);
    match core::str::from_utf8(head) {
        Ok(s) => s,
        Err(_) => panic!("generated CEL text is not UTF-8"),
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn str_lt(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut i = 0;
    while i < a.len() && i < b.len() {
        if a[i] != b[i] {
            return a[i] < b[i];
        }
        i += 1;
    }
    a.len() < b.len()
}

/// The options' names in byte order.
pub const fn sorted_names<const N: usize>(options: &[PolicyOption; N]) -> [&'static str; N] {
    let mut v = [""; N];
    let mut i = 0;
    while i < N {
        v[i] = options[i].name;
        i += 1;
    }
    let mut pass = 0;
    while pass < N {
        let mut j = 0;
        while j + 1 < N - pass {
            if str_lt(v[j + 1], v[j]) {
                let t = v[j];
                v[j] = v[j + 1];
                v[j + 1] = t;
            }
            j += 1;
        }
        pass += 1;
    }
    v
}

const fn find(options: &[PolicyOption], name: &str) -> PolicyOption {
    let mut i = 0;
    while i < options.len() {
        if str_eq(options[i].name, name) {
            return options[i];
        }
        i += 1;
    }
    panic!("option not in the engine's table")
}

/// The lower bound of a counted option.
pub const fn count_min(options: &[PolicyOption], name: &str) -> u32 {
    match find(options, name).kind {
        OptionKind::Count { min } => min,
        OptionKind::Bool => panic!("option is not a count"),
    }
}

/// The known-names rule of an options map and its message (`<field>.options: unknown option
/// name; known options are ...`).
pub const fn known(field: &str, names: &[&str]) -> (Text, Text) {
    let mut rule = Text::new().push("self.all(k, k in {");
    let mut msg = Text::new()
        .push(field)
        .push(".options: unknown option name; known options are ");
    let mut i = 0;
    while i < names.len() {
        if i > 0 {
            rule = rule.push(", ");
            msg = msg.push(", ");
        }
        rule = rule.push("'").push(names[i]).push("': true");
        msg = msg.push(names[i]);
        i += 1;
    }
    (rule.push("})"), msg)
}

/// One rule per incompatible pair: both `"true"` is refused.
pub const fn incompatible<const N: usize>(pairs: &[(&str, &str); N]) -> [(Text, Text); N] {
    let mut out = [(Text::new(), Text::new()); N];
    let mut i = 0;
    while i < N {
        let (a, b) = pairs[i];
        out[i] = (
            Text::new()
                .push("!('")
                .push(a)
                .push("' in self && self['")
                .push(a)
                .push("'] == 'true' && '")
                .push(b)
                .push("' in self && self['")
                .push(b)
                .push("'] == 'true')"),
            Text::new()
                .push("cpuManager.options: ")
                .push(a)
                .push(" and ")
                .push(b)
                .push(" cannot both be \"true\" (the kubelet rejects the combination)"),
        );
        i += 1;
    }
    out
}

/// The value rule of one option of a map, from its kind: a boolean is `"true"` or
/// `"false"`; a count is 1-3 digits and at least its minimum.
pub const fn value_rule(field: &str, options: &[PolicyOption], name: &str) -> (Text, Text) {
    let o = find(options, name);
    let rule = Text::new().push("!('").push(name).push("' in self) || ");
    let msg = Text::new().push(field).push(".options: ").push(name);
    match o.kind {
        OptionKind::Bool => (
            rule.push("self['")
                .push(name)
                .push("'] == 'true' || self['")
                .push(name)
                .push("'] == 'false'"),
            msg.push(" must be \"true\" or \"false\""),
        ),
        OptionKind::Count { min } => (
            rule.push("(self['")
                .push(name)
                .push("'].matches('^[0-9]{1,3}$') && int(self['")
                .push(name)
                .push("']) >= ")
                .push_u32(min)
                .push(")"),
            msg.push(" must be a whole number from ")
                .push_u32(min)
                .push(" (the kubelet's minimum) to 999"),
        ),
    }
}

/// Whether every option takes a boolean (the CPU manager's blanket value rule needs it).
pub const fn all_bool(options: &[PolicyOption]) -> bool {
    let mut i = 0;
    while i < options.len() {
        if !matches!(options[i].kind, OptionKind::Bool) {
            return false;
        }
        i += 1;
    }
    true
}
