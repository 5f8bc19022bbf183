//! Kubernetes resource quantities (`500m`, `1Gi`, `2`) as integers.
//!
//! The grammar is apimachinery's `resource.Quantity`:
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <signedNumber>    ::= [+-] <number>
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
//! ```
//!
//! Values are kept exact (mantissa digits times a power of ten times a power of two) and only
//! rounded when converted to an integer unit. The rounding is the apimachinery one: up, away
//! from zero (`Quantity.MilliValue()` / `Value()`), so `0.5m` CPU is 1 millicore and `1.5`
//! bytes is 2 bytes. No floating point anywhere: `0.1` is exactly one tenth.

use std::fmt;

/// A parsed quantity: `(-1)^negative * mantissa * 10^exp10 * 2^exp2`, exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// Why a quantity string is not acceptable. Every variant carries the offending string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not a quantity at all (empty, bad digits, unknown suffix, ...).
    #[error("invalid quantity {input:?}: {why}")]
    Syntax {
        /// The string as given.
        input: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A well-formed quantity too large (or too precise) to represent.
    #[error("quantity {input:?} is out of range")]
    OutOfRange {
        /// The string as given.
        input: String,
    },
    /// A negative quantity where only non-negative amounts make sense.
    #[error("quantity {input:?} must not be negative")]
    Negative {
        /// The string as given.
        input: String,
    },
    /// A fractional quantity where only whole numbers are allowed (extended resources).
    #[error("quantity {input:?} must be a whole number")]
    NotInteger {
        /// The string as given.
        input: String,
    },
}

fn syntax(input: &str, why: &'static str) -> QuantityError {
    QuantityError::Syntax {
        input: input.to_string(),
        why,
    }
}

impl Quantity {
    /// Parses a quantity string. Leading/trailing whitespace is not accepted (the API server
    /// does not accept it either).
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let bytes = input.as_bytes();
        if bytes.is_empty() {
            return Err(syntax(input, "empty string"));
        }
        let mut i = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            i = 1;
        }
        // Number: digits, optional '.', digits; at least one digit overall.
        let mut mantissa: u128 = 0;
        let mut exp10: i32 = 0;
        let mut ndigits = 0usize;
        let mut seen_dot = false;
        let mut overflow = false;
        while i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii_digit() {
                ndigits += 1;
                let d = u128::from(b - b'0');
                match mantissa.checked_mul(10).and_then(|m| m.checked_add(d)) {
                    Some(m) => {
                        mantissa = m;
                        if seen_dot {
                            exp10 -= 1;
                        }
                    }
                    None => {
                        // Digits past u128 precision: exact only if they are zeros.
                        if d != 0 {
                            overflow = true;
                        }
                        if !seen_dot {
                            exp10 += 1;
                        }
                    }
                }
            } else if b == b'.' && !seen_dot {
                seen_dot = true;
            } else {
                break;
            }
            i += 1;
        }
        if ndigits == 0 {
            return Err(syntax(input, "no digits"));
        }
        if overflow {
            return Err(QuantityError::OutOfRange {
                input: input.to_string(),
            });
        }
        let suffix = &input[i..];
        let mut exp2 = 0u32;
        match suffix {
            "" => {}
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            "Ki" => exp2 = 10,
            "Mi" => exp2 = 20,
            "Gi" => exp2 = 30,
            "Ti" => exp2 = 40,
            "Pi" => exp2 = 50,
            "Ei" => exp2 = 60,
            s if s.starts_with('e') || s.starts_with('E') => {
                let e = parse_exponent(&s[1..]).ok_or_else(|| syntax(input, "bad exponent"))?;
                exp10 = exp10
                    .checked_add(e)
                    .ok_or_else(|| QuantityError::OutOfRange {
                        input: input.to_string(),
                    })?;
            }
            _ => return Err(syntax(input, "unknown suffix")),
        }
        // Normalise so that equal values compare equal and range checks see the real size.
        while mantissa != 0 && mantissa % 10 == 0 {
            mantissa /= 10;
            exp10 += 1;
        }
        if mantissa == 0 {
            exp10 = 0;
            exp2 = 0;
            negative = false;
        }
        Ok(Self {
            negative,
            mantissa,
            exp10,
            exp2,
        })
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Whether the value is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The magnitude times `10^shift`, rounded up to an integer; `None` on overflow.
    fn ceil_abs_scaled(&self, shift: i32) -> Option<u128> {
        if self.mantissa == 0 {
            return Some(0);
        }
        let m = self.mantissa.checked_mul(1u128.checked_shl(self.exp2)?)?;
        let e = self.exp10.checked_add(shift)?;
        if e >= 0 {
            m.checked_mul(10u128.checked_pow(e as u32)?)
        } else {
            let k = e.unsigned_abs();
            // m < 2^128 < 10^39: dividing by 10^39 or more leaves a value in (0, 1).
            if k >= 39 {
                return Some(1);
            }
            let d = 10u128.pow(k);
            Some(m / d + u128::from(m % d != 0))
        }
    }

    /// Whether the value is a whole number.
    pub fn is_integer(&self) -> bool {
        if self.exp10 >= 0 || self.mantissa == 0 {
            return true;
        }
        let k = self.exp10.unsigned_abs();
        // mantissa * 2^exp2 divisible by 10^k needs the mantissa divisible by 5^k and by
        // 2^(k - exp2); mantissa has no factor 10 after normalisation.
        if k >= 56 {
            return false;
        }
        let five = 5u128.pow(k);
        if self.mantissa % five != 0 {
            return false;
        }
        let twos_needed = k.saturating_sub(self.exp2);
        twos_needed == 0 || self.mantissa.trailing_zeros() >= twos_needed
    }
}

/// `[+-]digits` as an `i32` exponent (no fraction, no further suffix).
fn parse_exponent(s: &str) -> Option<i32> {
    let (neg, digits) = match s.as_bytes().first()? {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i32 = digits.parse().ok()?;
    Some(if neg { -v } else { v })
}

impl fmt::Display for Quantity {
    /// A canonical, exact rendering: `<mantissa>e<exp10>` times an optional binary suffix,
    /// e.g. `15e-1`, `1Ki` (with exp10 0 the exponent is omitted).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative {
            f.write_str("-")?;
        }
        write!(f, "{}", self.mantissa)?;
        if self.exp10 != 0 {
            write!(f, "e{}", self.exp10)?;
        }
        if self.exp2 != 0 {
            write!(f, "*2^{}", self.exp2)?;
        }
        Ok(())
    }
}

fn non_negative(input: &str) -> Result<Quantity, QuantityError> {
    let q = Quantity::parse(input)?;
    if q.is_negative() {
        return Err(QuantityError::Negative {
            input: input.to_string(),
        });
    }
    Ok(q)
}

fn to_u64(input: &str, v: Option<u128>) -> Result<u64, QuantityError> {
    v.and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| QuantityError::OutOfRange {
            input: input.to_string(),
        })
}

/// A CPU quantity in millicores, rounded up like `MilliValue()`: `"500m"` -> 500,
/// `"2"` -> 2000, `"0.5m"` -> 1. Negative values are errors.
pub fn parse_millis(input: &str) -> Result<u64, QuantityError> {
    let q = non_negative(input)?;
    to_u64(input, q.ceil_abs_scaled(3))
}

/// A quantity in base units, rounded up like `Value()`: `"1Gi"` -> 1073741824,
/// `"100M"` -> 100000000, `"1e3"` -> 1000. Negative values are errors.
pub fn parse_units(input: &str) -> Result<u64, QuantityError> {
    let q = non_negative(input)?;
    to_u64(input, q.ceil_abs_scaled(0))
}

/// A whole-number count (extended resources such as devices): `"2"`, `"1k"`. Fractions and
/// negative values are errors, as the API server's validation has them.
pub fn parse_count(input: &str) -> Result<u64, QuantityError> {
    let q = non_negative(input)?;
    if !q.is_integer() {
        return Err(QuantityError::NotInteger {
            input: input.to_string(),
        });
    }
    to_u64(input, q.ceil_abs_scaled(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_millis() {
        for (s, v) in [
            ("500m", 500),
            ("2", 2000),
            ("2.5", 2500),
            ("0.1", 100),
            (".5", 500),
            ("1.", 1000),
            ("0.5m", 1),
            ("0.0001", 1),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1e-3", 1),
            ("+3", 3000),
            ("0", 0),
            ("-0", 0),
            ("0m", 0),
            ("1k", 1_000_000),
            ("128", 128_000),
            ("100e-2", 1000),
        ] {
            assert_eq!(parse_millis(s), Ok(v), "{s}");
        }
    }

    #[test]
    fn bytes() {
        for (s, v) in [
            ("1Gi", 1u64 << 30),
            ("2Mi", 2 << 20),
            ("1Ki", 1024),
            ("1.5Ki", 1536),
            ("0.5Ki", 512),
            ("100M", 100_000_000),
            ("1e3", 1000),
            ("1E", 1_000_000_000_000_000_000),
            ("1Ei", 1 << 60),
            ("1.5", 2),
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("123Mi", 123 << 20),
            ("1e-50", 1),
            ("0.001Ki", 2),
        ] {
            assert_eq!(parse_units(s), Ok(v), "{s}");
        }
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("2"), Ok(2));
        assert_eq!(parse_count("1k"), Ok(1000));
        assert_eq!(parse_count("20e-1"), Ok(2));
        assert_eq!(parse_count("0.5Ki"), Ok(512));
        assert!(matches!(
            parse_count("1.5"),
            Err(QuantityError::NotInteger { .. })
        ));
        assert!(matches!(
            parse_count("1m"),
            Err(QuantityError::NotInteger { .. })
        ));
    }

    #[test]
    fn errors_name_the_string() {
        for bad in [
            "", "abc", "1x", "1 ", " 1", "1..2", "1ki", "1e", "1e+", "1e1.5", "--1", ".", "m",
            "1Gii", "1mi",
        ] {
            let e = parse_millis(bad).expect_err(bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        let e = parse_millis("-1").expect_err("negative");
        assert_eq!(e.to_string(), "quantity \"-1\" must not be negative");
        let e = parse_units("20E").expect_err("too big");
        assert_eq!(
            e,
            QuantityError::OutOfRange {
                input: "20E".into()
            }
        );
        assert!(parse_units("1e400").is_err());
        assert!(parse_millis("999999999999999999999999999999999999999999").is_err());
    }

    #[test]
    fn exact_and_normalised() {
        assert_eq!(Quantity::parse("1000m"), Quantity::parse("1"));
        assert_eq!(Quantity::parse("1.0"), Quantity::parse("1"));
        assert_eq!(Quantity::parse("-0"), Quantity::parse("0"));
        assert_eq!(
            Quantity::parse("1.5Ki").map(|q| q.to_string()),
            Ok("15e-1*2^10".into())
        );
        // Trailing zeros past u128 precision are still exact.
        assert_eq!(
            parse_units("1.000000000000000000000000000000000000000000000"),
            Ok(1)
        );
    }
}
