//! Tokens of the C subset phenotypes are written in. Must never accept a literal C
//! would read differently: integer literals follow C's octal and hex rules, and a
//! floating literal is `float` only with an `f` suffix.

use super::ParseError;

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Int(i32),
    Float(f32),
    Double(f64),
    Punct(&'static str),
}

/// A token and its byte offset in the phenotype.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    pub at: usize,
}

/// Longest first, so `<<=` wins over `<<` and `<`.
const PUNCTS: &[&str] = &[
    "<<=", ">>=", "<=", ">=", "==", "!=", "&&", "||", "<<", ">>", "++", "--", "+=", "-=", "*=", "/=", "%=",
    "&=", "|=", "^=", "(", ")", "{", "}", "[", "]", ";", ",", "+", "-", "*", "/", "%", "<", ">", "=", "!",
    "~", "&", "|", "^", "?", ":",
];

pub(super) fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_whitespace() {
            i += 1;
        } else if src[i..].starts_with("//") {
            i = src[i..].find('\n').map_or(bytes.len(), |n| i + n);
        } else if src[i..].starts_with("/*") {
            match src[i + 2..].find("*/") {
                Some(n) => i += n + 4,
                None => {
                    return Err(ParseError::Syntax { at: i, message: "unterminated comment".into() });
                }
            }
        } else if b.is_ascii_alphabetic() || b == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token { tok: Tok::Ident(src[start..i].to_string()), at: start });
        } else if b.is_ascii_digit() || (b == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let (tok, len) = number(&src[i..]).map_err(|message| ParseError::Literal { at: i, message })?;
            out.push(Token { tok, at: i });
            i += len;
        } else if let Some(p) = PUNCTS.iter().find(|p| p.as_bytes()[0] == b && src[i..].starts_with(**p)) {
            out.push(Token { tok: Tok::Punct(p), at: i });
            i += p.len();
        } else {
            let c = src[i..].chars().next().unwrap_or('?');
            return Err(ParseError::Syntax { at: i, message: format!("unexpected character `{c}`") });
        }
    }
    Ok(out)
}

/// Reads one numeric literal at the start of `s`: its token and length.
fn number(s: &str) -> Result<(Tok, usize), String> {
    let b = s.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
    if s.starts_with("0x") || s.starts_with("0X") {
        let end = 2 + b[2..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
        if end == 2 || b.get(end).is_some_and(|&c| ident(c)) {
            return Err(format!("malformed hex literal `{}`", word(s)));
        }
        let v = u64::from_str_radix(&s[2..end], 16).map_err(|e| e.to_string())?;
        return Ok((Tok::Int(int_in_range(v, s, end)?), end));
    }
    let digits = |from: usize| from + b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut end = digits(0);
    let mut floating = false;
    if b.get(end) == Some(&b'.') {
        floating = true;
        end = digits(end + 1);
    }
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let mut e = end + 1;
        if matches!(b.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let after = digits(e);
        if after == e {
            return Err(format!("exponent without digits in `{}`", word(s)));
        }
        floating = true;
        end = after;
    }
    if floating {
        let text = &s[..end];
        if matches!(b.get(end), Some(b'f' | b'F')) {
            if b.get(end + 1).is_some_and(|&c| ident(c)) {
                return Err(format!("malformed literal `{}`", word(s)));
            }
            // Parsed straight to f32: C rounds the decimal once, to float.
            let v: f32 = text.parse().map_err(|_| format!("bad literal `{text}`"))?;
            return Ok((Tok::Float(v), end + 1));
        }
        if b.get(end).is_some_and(|&c| ident(c)) {
            return Err(format!("malformed literal `{}`", word(s)));
        }
        let v: f64 = text.parse().map_err(|_| format!("bad literal `{text}`"))?;
        return Ok((Tok::Double(v), end));
    }
    if b.get(end).is_some_and(|&c| ident(c)) {
        return Err(format!(
            "unsupported literal `{}` (integer suffixes and `f` on integers are not C ints)",
            word(s)
        ));
    }
    let text = &s[..end];
    let v = if text.len() > 1 && text.starts_with('0') {
        // C reads a leading zero as octal.
        u64::from_str_radix(&text[1..], 8).map_err(|_| format!("`{text}` is not a valid octal literal"))?
    } else {
        text.parse::<u64>().map_err(|_| format!("`{text}` is out of range for int"))?
    };
    Ok((Tok::Int(int_in_range(v, s, end)?), end))
}

fn int_in_range(v: u64, s: &str, end: usize) -> Result<i32, String> {
    // A larger literal would be long or unsigned in C; this subset has only int.
    i32::try_from(v).map_err(|_| format!("`{}` does not fit in int", &s[..end]))
}

fn word(s: &str) -> &str {
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '.'))
        .map_or(s.len(), |(i, _)| i);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn literal_types_follow_c() {
        assert_eq!(toks("07.35"), [Tok::Double(7.35)]);
        assert_eq!(toks("1.5f"), [Tok::Float(1.5)]);
        assert_eq!(toks("2e3"), [Tok::Double(2000.0)]);
        assert_eq!(toks("010"), [Tok::Int(8)]);
        assert_eq!(toks("0x1F"), [Tok::Int(31)]);
        assert_eq!(toks(".5"), [Tok::Double(0.5)]);
    }

    #[test]
    fn bad_literals_are_errors() {
        for s in ["09", "1f", "2147483648", "1e", "0x", "1.2.3", "3u"] {
            assert!(lex(s).is_err(), "{s}");
        }
    }

    #[test]
    fn punctuators_take_the_longest_match() {
        assert_eq!(
            toks("a<<=b<c"),
            [
                Tok::Ident("a".into()),
                Tok::Punct("<<="),
                Tok::Ident("b".into()),
                Tok::Punct("<"),
                Tok::Ident("c".into())
            ]
        );
    }

    #[test]
    fn comments_are_skipped() {
        assert_eq!(toks("1 // x\n/* y */ 2"), [Tok::Int(1), Tok::Int(2)]);
    }
}
