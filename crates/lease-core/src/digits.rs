//! `Digits`: a sequence number's decimal digits, kept in the value itself when they fit.
//!
//! # Why not an `Arc<str>`
//!
//! A reader makes a sequence number for every record and settlement keeps a copy of it until
//! the record settles. Held as an `Arc<str>`, each record cost an allocation on the reader's
//! thread that the handler's thread freed (glibc pays markedly more for a free of another
//! thread's memory), and a count both threads moved on one cache line at every copy and drop:
//! together about a tenth of the broker's CPU above the raw SDK loop in the `drain`
//! benchmark. Kinesis's sequence numbers are 56 digits; up to [`INLINE`] of them live in the
//! value (64 bytes, copied with a `memcpy`), longer ones in a shared string as before.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The most digits kept in the value itself: what fits beside the length and the variant's tag
/// in the 64 bytes the shared form takes anyway (it is 16 bytes, aligned to 8).
pub(crate) const INLINE: usize = 62;

/// Decimal digits (never empty; checked by [`Digits::parse`]), inline or shared.
#[derive(Clone)]
pub(crate) enum Digits {
    /// Up to [`INLINE`] digits; the bytes past `len` are `'0'` (checked with the rest by
    /// [`Digits::parse`], never part of the text).
    Inline { len: u8, bytes: [u8; INLINE] },
    /// More than [`INLINE`] digits.
    Shared(Arc<str>),
}

impl Digits {
    /// `text`'s digits, inline when they fit; `None` when `text` is empty or holds anything
    /// but ASCII digits.
    ///
    /// Text that fits is copied into a buffer of digits first and the whole buffer checked:
    /// a fixed-size check the compiler turns into a few vector compares, where checking the
    /// text and then copying it walked the bytes twice, in a loop of the text's length.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        if text.is_empty() {
            return None;
        }
        match u8::try_from(text.len()) {
            Ok(len) if text.len() <= INLINE => {
                let mut bytes = [b'0'; INLINE];
                bytes[..text.len()].copy_from_slice(text.as_bytes());
                let worst = bytes
                    .iter()
                    .fold(0u8, |worst, b| worst.max(b.wrapping_sub(b'0')));
                (worst < 10).then_some(Digits::Inline { len, bytes })
            }
            _ => all_digits(text).then(|| Digits::Shared(text.into())),
        }
    }

    /// `text`'s digits (checked by the caller), inline when they fit.
    #[cfg(test)]
    pub(crate) fn new(text: &str) -> Self {
        Self::parse(text).expect("digits")
    }

    /// The digits as text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Only ASCII digits are ever stored (`Digits::parse` checks them), so
            // this cannot fail; an empty answer would be the visible sign if it ever did.
            Digits::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Digits::Shared(text) => text,
        }
    }
}

/// True when `text` is a non-empty string of ASCII decimal digits. Checks every byte without
/// stopping at the first bad one, which lets the compiler check several at a time. (Eight
/// bytes at a time in a `u64` was tried: no fewer instructions per record in `drain`.)
pub(crate) fn all_digits(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .fold(0u8, |worst, b| worst.max(b.wrapping_sub(b'0')))
            < 10
}

impl PartialEq for Digits {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Digits {}

impl Hash for Digits {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Digits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_up_to_the_inline_limit_live_in_the_value_and_longer_ones_are_shared() {
        let kinesis = "49590338271490256608559692538361571095921575989136588898";
        assert!(matches!(Digits::new(kinesis), Digits::Inline { .. }));
        assert_eq!(Digits::new(kinesis).as_str(), kinesis);
        let longest_inline = "9".repeat(INLINE);
        assert!(matches!(
            Digits::new(&longest_inline),
            Digits::Inline { .. }
        ));
        assert_eq!(Digits::new(&longest_inline).as_str(), longest_inline);
        // Kinesis allows up to 129 digits.
        let long = "1".repeat(129);
        assert!(matches!(Digits::new(&long), Digits::Shared(_)));
        assert_eq!(Digits::new(&long).as_str(), long);
        assert_eq!(std::mem::size_of::<Digits>(), 64);
    }

    #[test]
    fn equal_texts_are_equal_digits_and_hash_alike() {
        use std::collections::hash_map::DefaultHasher;
        let hash = |d: &Digits| {
            let mut h = DefaultHasher::new();
            d.hash(&mut h);
            h.finish()
        };
        let (a, b) = (Digits::new("0042"), Digits::new("0042"));
        assert_eq!(a, b);
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(Digits::new("42"), Digits::new("0042"));
        assert_eq!(format!("{a:?}"), "\"0042\"");
    }

    #[test]
    fn only_non_empty_runs_of_ascii_digits_pass() {
        assert!(all_digits("0"));
        assert!(all_digits("0123456789"));
        assert!(all_digits(&"7".repeat(200)));
        for bad in ["", "12a4", "-1", "1.5", " 12", "12 ", "١٢", "/", ":"] {
            assert!(!all_digits(bad), "{bad:?} passed");
        }
    }

    /// The checks (of long text, and of text copied inline) answer as a plain byte-by-byte
    /// one, whatever byte sits wherever (each byte value at each place of texts of 1 to 24
    /// bytes and of either side of the inline limit, the rest digits).
    #[test]
    fn the_check_answers_as_one_byte_by_byte_whatever_byte_sits_where() {
        let naive = |t: &[u8]| !t.is_empty() && t.iter().all(u8::is_ascii_digit);
        for len in (1..=24).chain(INLINE - 2..=INLINE + 2) {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut text = vec![b'5'; len];
                    text[at] = b;
                    // Only valid UTF-8 can be a `&str`; other bytes come in valid sequences.
                    if let Ok(s) = std::str::from_utf8(&text) {
                        assert_eq!(all_digits(s), naive(&text), "{text:?}");
                        let parsed = Digits::parse(s);
                        assert_eq!(parsed.is_some(), naive(&text), "{text:?}");
                        if let Some(digits) = parsed {
                            assert_eq!(digits.as_str(), s);
                        }
                    }
                }
            }
        }
        assert!(Digits::parse("").is_none());
        for s in [
            "٣",
            "é",
            "€",
            "9€9",
            "12345678€",
            "1234567€",
            "12345678901234567890٣",
        ] {
            assert!(!all_digits(s), "{s:?} passed");
        }
        // Bad bytes at once below and above a digit, across a chunk's border.
        assert!(!all_digits("0000000/:0000000"));
        assert!(!all_digits("00000000\u{7f}0000000"));
    }
}
