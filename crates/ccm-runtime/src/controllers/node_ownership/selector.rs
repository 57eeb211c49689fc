//! Kubernetes label selectors in their string form, as `kubectl get nodes -l` takes them:
//! comma-separated requirements that must all hold, each `key=value` (or `key==value`),
//! `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (the label exists) or `!key` (it
//! does not). Read as apimachinery's `labels.Parse` reads them — the same tokens, the same
//! empty values (`key=`, `key in ()`, `key in (a,)`), the same validation of keys and values
//! — into kube's [`Selector`], which matches them. The numeric `>` and `<` operators are
//! refused: they make no sense for choosing Nodes. A pure function, bounded:
//! [`MAX_SELECTOR_BYTES`] of text, [`MAX_REQUIREMENTS`] requirements.

use std::collections::{BTreeMap, BTreeSet};

use ccm_provider::echo::echo;
use kube::core::{Expression, Selector, SelectorExt};

use crate::controllers::{is_dns1123_subdomain, is_label_name};

/// The longest selector accepted: 4 KiB. A selector that chooses Nodes names a label or
/// two; 4 KiB holds dozens of requirements, while a runaway value (a file pasted into the
/// flag) is refused at start.
pub const MAX_SELECTOR_BYTES: usize = 4096;

/// The most requirements a selector may have: 64. Each Node is matched against every one of
/// them on every pass of every controller.
pub const MAX_REQUIREMENTS: usize = 64;

/// A parsed label selector: the text as given and the requirements it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelSelector {
    text: String,
    selector: Selector,
}

impl LabelSelector {
    /// Parses `text` as `kubectl -l` and apimachinery's `labels.Parse` do: comma-separated
    /// requirements, all of which must hold; the numeric `>` and `<` are refused. An empty selector
    /// (or one of whitespace) selects everything. The error says what was found where, with
    /// apimachinery's wording (`found ')', expected: identifier`).
    ///
    /// ```
    /// use ccm_runtime::controllers::node_ownership::LabelSelector;
    /// let s = LabelSelector::parse("example.com/cloud in (do,do-2), !example.com/bare-metal").unwrap();
    /// assert!(s.matches_labels(&[("example.com/cloud".into(), "do".into())].into()));
    /// assert!(LabelSelector::parse("cloud in do").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_SELECTOR_BYTES {
            return Err(format!(
                "is {} bytes long; at most {MAX_SELECTOR_BYTES} are accepted",
                text.len()
            ));
        }
        let requirements = Parser::new(text).parse()?;
        if requirements.len() > MAX_REQUIREMENTS {
            return Err(format!(
                "has more than {MAX_REQUIREMENTS} requirements, the most accepted"
            ));
        }
        Ok(Self {
            text: text.to_owned(),
            selector: requirements.into_iter().collect(),
        })
    }

    /// The selector as it was given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it selects everything (no requirement).
    pub fn selects_all(&self) -> bool {
        self.selector.selects_all()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }

    /// Whether an object with `labels` (`None`: none at all) satisfies every requirement.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        match labels {
            Some(labels) => self.matches_labels(labels),
            None => self.matches_labels(&BTreeMap::new()),
        }
    }
}

/// A token of the selector language (apimachinery's lexer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    /// A key, a value, or one of the words `in` and `notin`.
    Word(&'a str),
    /// `!`
    Bang,
    /// `!=`
    NotEquals,
    /// `=`
    Equals,
    /// `==`
    DoubleEquals,
    /// `(`
    Open,
    /// `)`
    Close,
    /// `,`
    Comma,
    /// `>`
    Greater,
    /// `<`
    Less,
    /// The end of the text.
    End,
}

impl Token<'_> {
    /// The token as apimachinery quotes it in its errors.
    fn literal(self) -> &'static str {
        match self {
            Token::Word(_) => "identifier",
            Token::Bang => "!",
            Token::NotEquals => "!=",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::Greater => ">",
            Token::Less => "<",
            Token::End => "",
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

struct Parser<'a> {
    rest: &'a str,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Self { rest: text }
    }

    /// The next token and the text after it.
    fn scan(&self) -> (Token<'a>, &'a str) {
        let s = self.rest.trim_start_matches(is_space);
        let Some(c) = s.chars().next() else {
            return (Token::End, s);
        };
        if !is_special(c) {
            let end = s.find(|c| is_space(c) || is_special(c)).unwrap_or(s.len());
            return (Token::Word(&s[..end]), &s[end..]);
        }
        let two = s.get(..2);
        match (c, two) {
            (_, Some("!=")) => (Token::NotEquals, &s[2..]),
            (_, Some("==")) => (Token::DoubleEquals, &s[2..]),
            ('!', _) => (Token::Bang, &s[1..]),
            ('=', _) => (Token::Equals, &s[1..]),
            ('(', _) => (Token::Open, &s[1..]),
            (')', _) => (Token::Close, &s[1..]),
            (',', _) => (Token::Comma, &s[1..]),
            ('>', _) => (Token::Greater, &s[1..]),
            _ => (Token::Less, &s[1..]),
        }
    }

    fn peek(&self) -> Token<'a> {
        self.scan().0
    }

    fn next(&mut self) -> Token<'a> {
        let (token, rest) = self.scan();
        self.rest = rest;
        token
    }

    /// What an error quotes as found: the word itself, or the symbol.
    fn found(token: Token<'_>) -> String {
        match token {
            Token::Word(w) => echo(w).to_string(),
            other => other.literal().to_owned(),
        }
    }

    fn parse(mut self) -> Result<Vec<Expression>, String> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                Token::Word(_) | Token::Bang => {
                    out.push(self.requirement()?);
                    if out.len() > MAX_REQUIREMENTS {
                        // Counted as they come: a long list is refused without reading on.
                        return Ok(out);
                    }
                    match self.next() {
                        Token::End => return Ok(out),
                        Token::Comma => match self.peek() {
                            Token::Word(_) | Token::Bang => {}
                            other => {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    Self::found(other)
                                ));
                            }
                        },
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                Self::found(other)
                            ));
                        }
                    }
                }
                Token::End => return Ok(out),
                other => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        Self::found(other)
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Expression, String> {
        let mut token = self.next();
        let absent = token == Token::Bang;
        if absent {
            token = self.next();
        }
        let Token::Word(key) = token else {
            return Err(format!(
                "found '{}', expected: identifier",
                Self::found(token)
            ));
        };
        validate_key(key)?;
        let key = key.to_owned();
        if absent {
            return Ok(Expression::DoesNotExist(key));
        }
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(Expression::Exists(key));
        }
        match self.next() {
            Token::Word("in") => Ok(Expression::In(key, self.value_set()?)),
            Token::Word("notin") => Ok(Expression::NotIn(key, self.value_set()?)),
            Token::Equals | Token::DoubleEquals => Ok(Expression::Equal(key, self.exact_value()?)),
            Token::NotEquals => Ok(Expression::NotEqual(key, self.exact_value()?)),
            Token::Greater | Token::Less => Err(format!(
                "the numeric operators > and < (after {:?}) are not supported here",
                echo(&key).to_string()
            )),
            other => Err(format!(
                "found '{}', expected: in, notin, =, ==, !=",
                Self::found(other)
            )),
        }
    }

    /// The value after `=`, `==` or `!=`: a word, or empty before `,` or the end.
    fn exact_value(&mut self) -> Result<String, String> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.next() {
            Token::Word(value) => {
                validate_value(value)?;
                Ok(value.to_owned())
            }
            other => Err(format!(
                "found '{}', expected: identifier",
                Self::found(other)
            )),
        }
    }

    /// The values of `in` / `notin`: `(a,b)`; an empty item is the empty value (`()`,
    /// `(a,)`, `(,a)`), as in apimachinery.
    fn value_set(&mut self) -> Result<BTreeSet<String>, String> {
        let open = self.next();
        if open != Token::Open {
            return Err(format!("found '{}', expected: '('", Self::found(open)));
        }
        let mut values = BTreeSet::new();
        // Whether the last thing read was a value (else: '(' or ',').
        let mut after_value = false;
        loop {
            match self.next() {
                Token::Word(value) if !after_value => {
                    validate_value(value)?;
                    values.insert(value.to_owned());
                    after_value = true;
                }
                Token::Comma => {
                    if !after_value {
                        values.insert(String::new());
                    }
                    after_value = false;
                }
                Token::Close => {
                    if !after_value {
                        values.insert(String::new());
                    }
                    return Ok(values);
                }
                other if after_value => {
                    return Err(format!(
                        "found '{}', expected: ',' or ')'",
                        Self::found(other)
                    ));
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        Self::found(other)
                    ));
                }
            }
        }
    }
}

/// A label key as the API server validates it: an optional DNS-subdomain prefix and `/`,
/// then a name.
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let ok = is_label_name(name) && prefix.is_none_or(|p| !p.is_empty() && is_dns1123_subdomain(p));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid label key {:?}: a key is an optional DNS subdomain and '/', then at most 63 \
             characters of [A-Za-z0-9._-] starting and ending alphanumeric",
            echo(key).to_string()
        ))
    }
}

/// A label value as the API server validates it: empty, or a label name's shape.
fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {:?}: at most 63 characters of [A-Za-z0-9._-] starting and \
             ending alphanumeric",
            echo(value).to_string()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn parsed(text: &str) -> Vec<Expression> {
        LabelSelector::parse(text)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"))
            .selector
            .into_iter()
            .collect()
    }

    fn set(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn every_operator_parses() {
        use Expression::*;
        assert_eq!(parsed("a=b"), [Equal("a".into(), "b".into())]);
        assert_eq!(parsed("a==b"), [Equal("a".into(), "b".into())]);
        assert_eq!(parsed("a!=b"), [NotEqual("a".into(), "b".into())]);
        assert_eq!(parsed("a in (b,c)"), [In("a".into(), set(&["b", "c"]))]);
        assert_eq!(parsed("a notin (b)"), [NotIn("a".into(), set(&["b"]))]);
        assert_eq!(parsed("a"), [Exists("a".into())]);
        assert_eq!(parsed("!a"), [DoesNotExist("a".into())]);
        assert_eq!(
            parsed(" example.com/cloud = do ,  ! example.com/metal,x in(y) "),
            [
                Equal("example.com/cloud".into(), "do".into()),
                DoesNotExist("example.com/metal".into()),
                In("x".into(), set(&["y"])),
            ]
        );
    }

    #[test]
    fn empty_values_are_apimachinery_s() {
        use Expression::*;
        assert_eq!(parsed("a="), [Equal("a".into(), String::new())]);
        assert_eq!(
            parsed("a=,b"),
            [Equal("a".into(), String::new()), Exists("b".into())]
        );
        assert_eq!(parsed("a!="), [NotEqual("a".into(), String::new())]);
        assert_eq!(parsed("a in ()"), [In("a".into(), set(&[""]))]);
        assert_eq!(parsed("a in (b,)"), [In("a".into(), set(&["b", ""]))]);
        assert_eq!(parsed("a in (,b)"), [In("a".into(), set(&["", "b"]))]);
        assert_eq!(parsed("a in (,,b)"), [In("a".into(), set(&["", "b"]))]);
        // `in` and `notin` are words where a key or a value is expected.
        assert_eq!(parsed("in=notin"), [Equal("in".into(), "notin".into())]);
        assert_eq!(parsed("in in (in)"), [In("in".into(), set(&["in"]))]);
    }

    #[test]
    fn empty_or_blank_selects_everything() {
        for text in ["", "  ", "\t\n"] {
            let s = LabelSelector::parse(text).unwrap();
            assert!(s.selects_all());
            assert!(s.matches(None));
            assert!(s.matches_labels(&labels(&[("a", "b")])));
        }
    }

    #[test]
    fn malformed_selectors_say_what_was_found() {
        for (text, error) in [
            ("a in b", "found 'b', expected: '('"),
            ("a in (b", "found '', expected: ',' or ')'"),
            ("a in (b c)", "found 'c', expected: ',' or ')'"),
            ("a in (=)", "found '=', expected: ',', ')' or identifier"),
            ("a=b,", "found '', expected: identifier after ','"),
            (
                ",a",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            ("!a=b", "found '=', expected: ',' or 'end of string'"),
            ("a b", "found 'b', expected: in, notin, =, ==, !="),
            ("a=(b)", "found '(', expected: identifier"),
            ("!", "found '', expected: identifier"),
            ("=b", "expected: !, identifier, or 'end of string'"),
            ("a>1", "the numeric operators > and <"),
            ("a < 1", "the numeric operators > and <"),
            ("a=b=c", "found '=', expected: ',' or 'end of string'"),
        ] {
            let err = LabelSelector::parse(text).expect_err(text);
            assert!(err.contains(error), "{text:?}: {err}");
        }
    }

    /// A DNS subdomain of 192 + `last` characters: three labels of 63 and one of `last`.
    fn long_prefix(last: usize) -> String {
        let label = "p".repeat(63);
        format!("{label}.{label}.{label}.{}", "q".repeat(last))
    }

    #[test]
    fn keys_and_values_are_validated_as_the_api_server_does() {
        for good in [
            "a",
            "A.b_c-9",
            "example.com/x",
            "node.kubernetes.io/instance-type",
            &"k".repeat(63),
            &format!("{}/k", long_prefix(61)),
        ] {
            assert!(LabelSelector::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "-a",
            "a-",
            "/a",
            "a/",
            "a/b/c",
            "Example.com/a",
            "ex_ample.com/a",
            "é",
            &"k".repeat(64),
            &format!("{}/k", long_prefix(62)),
        ] {
            let err = LabelSelector::parse(bad).expect_err(bad);
            assert!(err.contains("invalid label key"), "{bad}: {err}");
        }
        for bad in [
            "a=-b",
            "a=b-",
            "a in (x,y_)",
            "a!=é",
            &format!("a={}", "v".repeat(64)),
        ] {
            let err = LabelSelector::parse(bad).expect_err(bad);
            assert!(err.contains("invalid label value"), "{bad}: {err}");
        }
    }

    #[test]
    fn size_and_requirement_count_are_bounded() {
        let long = format!("a={}", "b".repeat(MAX_SELECTOR_BYTES));
        assert!(
            LabelSelector::parse(&long)
                .unwrap_err()
                .contains("at most 4096")
        );
        let many = |n: usize| {
            (0..n)
                .map(|i| format!("k{i}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert!(LabelSelector::parse(&many(MAX_REQUIREMENTS)).is_ok());
        assert!(
            LabelSelector::parse(&many(MAX_REQUIREMENTS + 1))
                .unwrap_err()
                .contains("more than 64 requirements")
        );
        // Echoed input is cut.
        let err = LabelSelector::parse(&format!("{} x", "k".repeat(300))).unwrap_err();
        assert!(err.len() < 600, "{err}");
    }

    #[test]
    fn matching_is_kubernetes_s() {
        let s = |t: &str| LabelSelector::parse(t).unwrap();
        let do_node = labels(&[("cloud", "do"), ("zone", "ams3")]);
        let metal = labels(&[("cloud", "metal")]);
        let bare = labels(&[]);
        assert!(s("cloud=do").matches_labels(&do_node));
        assert!(!s("cloud=do").matches_labels(&metal));
        assert!(!s("cloud=do").matches_labels(&bare));
        assert!(s("cloud!=metal").matches_labels(&do_node));
        assert!(
            s("cloud!=metal").matches_labels(&bare),
            "absent is not equal"
        );
        assert!(s("cloud in (do,aws)").matches_labels(&do_node));
        assert!(!s("cloud in (do,aws)").matches_labels(&bare));
        assert!(
            s("cloud notin (metal)").matches_labels(&bare),
            "absent is not in"
        );
        assert!(!s("cloud notin (metal)").matches_labels(&metal));
        assert!(s("zone").matches_labels(&do_node));
        assert!(!s("zone").matches_labels(&metal));
        assert!(s("!zone").matches_labels(&metal));
        assert!(s("cloud=do,zone").matches_labels(&do_node));
        assert!(
            !s("cloud=do,!zone").matches_labels(&do_node),
            "all must hold"
        );
        assert!(s("cloud=").matches_labels(&labels(&[("cloud", "")])));
        assert!(!s("cloud=").matches_labels(&bare));
        assert!(!s("cloud").matches(None));
        assert!(s("!cloud").matches(None));
    }

    #[test]
    fn the_text_is_kept() {
        let s = LabelSelector::parse("a = b").unwrap();
        assert_eq!(s.as_str(), "a = b");
    }
}
