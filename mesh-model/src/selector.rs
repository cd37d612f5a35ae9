//! Selectors: one grammar for every place a set of nodes is chosen (a wave, an assignment, and
//! the `--select` of `push`, `plan` and `status`).
//!
//! Start at [`Selector`]: [`Selector::parse`] reads one, [`Selector::matches`] judges one node by
//! its name and labels, and [`resolve`] chooses the nodes of a whole inventory, refusing a
//! selector that names a label no node has (a typo is an error, never an empty set).
//!
//! # The grammar
//!
//! Terms separated by commas, all of which must hold (comma is *and*); spaces around tokens are
//! allowed:
//!
//! | term | holds for a node that |
//! |---|---|
//! | `site=fra` | has the label `site` with the value `fra` |
//! | `role!=db` | has no label `role`, or one with another value |
//! | `site in (fra,ams)` | has the label `site` with one of the values |
//! | `site notin (fra,ams)` | has no label `site`, or one with none of the values |
//! | `!canary` | has no label `canary` |
//! | `canary`, `web-17` | has the label `canary` (any value), or is the node named so |
//!
//! A word (label key, value or node name) is ASCII letters, digits, `_`, `-`, `.` and `/`.
//! [`Selector`]'s `Display` writes the selector back in this grammar, so that `parse` of what it
//! writes gives the same selector.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A node's labels: key → value (`labels = { site = "fra", role = "edge" }`).
pub type Labels = BTreeMap<String, String>;

/// A parsed selector: every term must hold.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Selector {
    /// The terms, in the order written; never empty.
    pub terms: Vec<Term>,
}

/// One term of a selector.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Term {
    /// `key=value`: the label is set to the value.
    Equals {
        /// The label key.
        key: String,
        /// The value.
        value: String,
    },
    /// `key!=value`: the label is absent, or set to another value.
    NotEquals {
        /// The label key.
        key: String,
        /// The value.
        value: String,
    },
    /// `key in (a,b)`: the label is set to one of the values.
    In {
        /// The label key.
        key: String,
        /// The values, as written.
        values: Vec<String>,
    },
    /// `key notin (a,b)`: the label is absent, or set to none of the values.
    NotIn {
        /// The label key.
        key: String,
        /// The values, as written.
        values: Vec<String>,
    },
    /// `!key`: the label is absent.
    Absent {
        /// The label key.
        key: String,
    },
    /// A bare word: the node named so, or a node with that label (any value).
    Word {
        /// The word.
        word: String,
    },
}

/// A selector that does not parse: where, what was expected and what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("selector `{text}`, at character {position}: expected {expected}, found {found}")]
pub struct SelectorError {
    /// The selector as written.
    pub text: String,
    /// Where the problem is: a character offset, 1 for the first (one past the end at the end).
    pub position: usize,
    /// What the grammar expected there.
    pub expected: &'static str,
    /// What was there instead (`the end` at the end).
    pub found: String,
}

/// A selector that parses but cannot choose nodes: it names labels (or words) no node has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "selector `{selector}` names {} no node has: {}",
    if unknown.len() == 1 { "a label" } else { "labels" },
    unknown.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
)]
pub struct UnknownLabels {
    /// The selector, as its `Display` writes it.
    pub selector: String,
    /// The label keys (or bare words) no node has, in order.
    pub unknown: Vec<String>,
}

impl Term {
    /// Whether the term holds for a node with this name and these labels.
    pub fn matches(&self, node: &str, labels: &Labels) -> bool {
        match self {
            Term::Equals { key, value } => labels.get(key) == Some(value),
            Term::NotEquals { key, value } => labels.get(key) != Some(value),
            Term::In { key, values } => labels.get(key).is_some_and(|v| values.contains(v)),
            Term::NotIn { key, values } => !labels.get(key).is_some_and(|v| values.contains(v)),
            Term::Absent { key } => !labels.contains_key(key),
            Term::Word { word } => node == word || labels.contains_key(word),
        }
    }

    /// The label key the term names (or its bare word).
    pub fn key(&self) -> &str {
        match self {
            Term::Equals { key, .. }
            | Term::NotEquals { key, .. }
            | Term::In { key, .. }
            | Term::NotIn { key, .. }
            | Term::Absent { key } => key,
            Term::Word { word } => word,
        }
    }
}

impl Selector {
    /// Parses a selector.
    ///
    /// # Errors
    /// A [`SelectorError`] naming the character where the text leaves the grammar, what was
    /// expected there and what was found.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        Parser {
            text,
            chars: text.chars().collect(),
            at: 0,
        }
        .selector()
    }

    /// Whether every term holds for a node with this name and these labels.
    pub fn matches(&self, node: &str, labels: &Labels) -> bool {
        self.terms.iter().all(|term| term.matches(node, labels))
    }

    /// The label keys and words the selector names that no node has: a word is known when a
    /// node is named so or has it as a label; a key when some node has it.
    pub fn unknown_labels<'n>(
        &self,
        nodes: impl IntoIterator<Item = (&'n str, &'n Labels)> + Clone,
    ) -> Vec<String> {
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        let mut names: BTreeSet<&str> = BTreeSet::new();
        for (name, labels) in nodes {
            names.insert(name);
            keys.extend(labels.keys().map(String::as_str));
        }
        let mut unknown: Vec<String> = Vec::new();
        for term in &self.terms {
            let known = match term {
                Term::Word { word } => {
                    names.contains(word.as_str()) || keys.contains(word.as_str())
                }
                Term::Equals { .. }
                | Term::NotEquals { .. }
                | Term::In { .. }
                | Term::NotIn { .. }
                | Term::Absent { .. } => keys.contains(term.key()),
            };
            if !known && !unknown.iter().any(|u| u == term.key()) {
                unknown.push(term.key().to_owned());
            }
        }
        unknown
    }
}

/// The nodes a selector chooses among `nodes` (name and labels), in order of name.
///
/// # Errors
/// [`UnknownLabels`] when the selector names a label key (or a bare word) that no node has —
/// never an empty set for a typo.
pub fn resolve<'n>(
    selector: &Selector,
    nodes: impl IntoIterator<Item = (&'n str, &'n Labels)> + Clone,
) -> Result<BTreeSet<&'n str>, UnknownLabels> {
    let unknown = selector.unknown_labels(nodes.clone());
    if !unknown.is_empty() {
        return Err(UnknownLabels {
            selector: selector.to_string(),
            unknown,
        });
    }
    Ok(nodes
        .into_iter()
        .filter(|(name, labels)| selector.matches(name, labels))
        .map(|(name, _)| name)
        .collect())
}

/// Whether `text` is a word of the grammar (a label key, a value, a node name).
pub fn is_word(text: &str) -> bool {
    !text.is_empty() && text.chars().all(is_word_char)
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

struct Parser<'t> {
    text: &'t str,
    chars: Vec<char>,
    at: usize,
}

impl Parser<'_> {
    fn error(&self, expected: &'static str) -> SelectorError {
        let found = match self.chars.get(self.at) {
            None => "the end".to_owned(),
            Some(c) if c.is_whitespace() => "a space".to_owned(),
            Some(c) => format!("`{c}`"),
        };
        SelectorError {
            text: self.text.to_owned(),
            position: self.at + 1,
            expected,
            found,
        }
    }

    fn skip_spaces(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn word(&mut self, expected: &'static str) -> Result<String, SelectorError> {
        self.skip_spaces();
        let start = self.at;
        while self.peek().is_some_and(is_word_char) {
            self.at += 1;
        }
        if self.at == start {
            return Err(self.error(expected));
        }
        Ok(self.chars[start..self.at].iter().collect())
    }

    fn selector(mut self) -> Result<Selector, SelectorError> {
        let mut terms = vec![self.term()?];
        loop {
            self.skip_spaces();
            match self.peek() {
                None => return Ok(Selector { terms }),
                Some(',') => {
                    self.at += 1;
                    terms.push(self.term()?);
                }
                Some(_) => return Err(self.error("`,` or the end")),
            }
        }
    }

    fn term(&mut self) -> Result<Term, SelectorError> {
        self.skip_spaces();
        if self.peek() == Some('!') {
            self.at += 1;
            let key = self.word("a label key after `!`")?;
            return Ok(Term::Absent { key });
        }
        let key = self.word("a label key or a node name")?;
        self.skip_spaces();
        match self.peek() {
            Some('=') => {
                self.at += 1;
                let value = self.word("a label value after `=`")?;
                Ok(Term::Equals { key, value })
            }
            Some('!') => {
                self.at += 1;
                if self.peek() != Some('=') {
                    return Err(self.error("`=` after `!`"));
                }
                self.at += 1;
                let value = self.word("a label value after `!=`")?;
                Ok(Term::NotEquals { key, value })
            }
            Some(c) if is_word_char(c) => {
                let before = self.at;
                let operator = self.word("`in` or `notin`")?;
                let values = match operator.as_str() {
                    "in" | "notin" => self.values()?,
                    _ => {
                        self.at = before;
                        return Err(self.error("`=`, `!=`, `in`, `notin`, `,` or the end"));
                    }
                };
                Ok(if operator == "in" {
                    Term::In { key, values }
                } else {
                    Term::NotIn { key, values }
                })
            }
            None | Some(_) => Ok(Term::Word { word: key }),
        }
    }

    fn values(&mut self) -> Result<Vec<String>, SelectorError> {
        self.skip_spaces();
        if self.peek() != Some('(') {
            return Err(self.error("`(` to open the values"));
        }
        self.at += 1;
        let mut values = vec![self.word("a label value")?];
        loop {
            self.skip_spaces();
            match self.peek() {
                Some(',') => {
                    self.at += 1;
                    values.push(self.word("a label value")?);
                }
                Some(')') => {
                    self.at += 1;
                    return Ok(values);
                }
                None | Some(_) => return Err(self.error("`,` or `)`")),
            }
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::Equals { key, value } => write!(f, "{key}={value}"),
            Term::NotEquals { key, value } => write!(f, "{key}!={value}"),
            Term::In { key, values } => write!(f, "{key} in ({})", values.join(",")),
            Term::NotIn { key, values } => write!(f, "{key} notin ({})", values.join(",")),
            Term::Absent { key } => write!(f, "!{key}"),
            Term::Word { word } => f.write_str(word),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, term) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{term}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Selector::parse(text)
    }
}

impl Serialize for Selector {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Selector::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn error(text: &str) -> String {
        Selector::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn each_form_parses_and_writes_back_as_written() {
        for text in [
            "site=fra,role!=db",
            "site in (fra,ams)",
            "site notin (fra,ams),!canary",
            "canary",
            "web-17",
            "zone/rack=r1.a_b",
        ] {
            let selector = Selector::parse(text).unwrap();
            assert_eq!(selector.to_string(), text);
        }
        let spaced =
            Selector::parse(" site = fra , role != db ,site in ( fra , ams ), ! x").unwrap();
        assert_eq!(spaced.to_string(), "site=fra,role!=db,site in (fra,ams),!x");
    }

    #[test]
    fn each_term_matches_as_its_table_says() {
        let fra_edge = labels(&[("site", "fra"), ("role", "edge")]);
        let ams_db = labels(&[("site", "ams"), ("role", "db"), ("canary", "yes")]);
        let bare = labels(&[]);
        let check = |text: &str, expected: [bool; 3]| {
            let selector = Selector::parse(text).unwrap();
            let found = [
                selector.matches("web-1", &fra_edge),
                selector.matches("db-1", &ams_db),
                selector.matches("lone", &bare),
            ];
            assert_eq!(found, expected, "{text}");
        };
        check("site=fra", [true, false, false]);
        check("role!=db", [true, false, true]);
        check("site in (fra,ams)", [true, true, false]);
        check("site notin (fra)", [false, true, true]);
        check("!canary", [true, false, true]);
        check("canary", [false, true, false]);
        check("lone", [false, false, true]);
        check("site=fra,role!=db", [true, false, false]);
    }

    #[test]
    fn errors_name_the_position_and_what_was_expected() {
        assert_eq!(
            error("site="),
            "selector `site=`, at character 6: expected a label value after `=`, found the end"
        );
        assert_eq!(
            error(""),
            "selector ``, at character 1: expected a label key or a node name, found the end"
        );
        assert_eq!(
            error("site in fra"),
            "selector `site in fra`, at character 9: expected `(` to open the values, found `f`"
        );
        assert_eq!(
            error("site in (fra"),
            "selector `site in (fra`, at character 13: expected `,` or `)`, found the end"
        );
        assert_eq!(
            error("site fra"),
            "selector `site fra`, at character 6: expected `=`, `!=`, `in`, `notin`, `,` or the \
             end, found `f`"
        );
        assert_eq!(
            error("a,,b"),
            "selector `a,,b`, at character 3: expected a label key or a node name, found `,`"
        );
        assert_eq!(
            error("role!db"),
            "selector `role!db`, at character 6: expected `=` after `!`, found `d`"
        );
        assert_eq!(
            error("a=b)"),
            "selector `a=b)`, at character 4: expected `,` or the end, found `)`"
        );
    }

    #[test]
    fn a_selector_naming_a_label_no_node_has_is_refused_naming_it() {
        let a = labels(&[("site", "fra")]);
        let b = labels(&[("site", "ams"), ("role", "edge")]);
        let nodes = [("a", &a), ("b", &b)];
        let chosen = resolve(&Selector::parse("site=fra").unwrap(), nodes).unwrap();
        assert_eq!(chosen, BTreeSet::from(["a"]));
        let by_name = resolve(&Selector::parse("b").unwrap(), nodes).unwrap();
        assert_eq!(by_name, BTreeSet::from(["b"]));
        // A value no node has is an empty set; a key no node has is an error.
        assert!(resolve(&Selector::parse("site=lhr").unwrap(), nodes)
            .unwrap()
            .is_empty());
        let error = resolve(
            &Selector::parse("sit=fra,!canary,role=edge").unwrap(),
            nodes,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "selector `sit=fra,!canary,role=edge` names labels no node has: `sit`, `canary`"
        );
        let error = resolve(&Selector::parse("web-9").unwrap(), nodes).unwrap_err();
        assert_eq!(
            error.to_string(),
            "selector `web-9` names a label no node has: `web-9`"
        );
    }

    fn word() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9_./-]{0,6}"
    }

    fn term() -> impl Strategy<Value = Term> {
        let values = || proptest::collection::vec(word(), 1..4);
        prop_oneof![
            (word(), word()).prop_map(|(key, value)| Term::Equals { key, value }),
            (word(), word()).prop_map(|(key, value)| Term::NotEquals { key, value }),
            (word(), values()).prop_map(|(key, values)| Term::In { key, values }),
            (word(), values()).prop_map(|(key, values)| Term::NotIn { key, values }),
            word().prop_map(|key| Term::Absent { key }),
            word().prop_map(|word| Term::Word { word }),
        ]
    }

    proptest! {
        #[test]
        fn the_parser_never_panics(text in "\\PC{0,40}") {
            let _ = Selector::parse(&text);
        }

        #[test]
        fn the_parser_never_panics_on_near_selectors(text in "[a-z=!,() ]{0,30}") {
            if let Err(error) = Selector::parse(&text) {
                prop_assert!(error.position >= 1 && error.position <= text.chars().count() + 1);
            }
        }

        #[test]
        fn what_display_writes_parses_back_to_the_same_selector(
            terms in proptest::collection::vec(term(), 1..5)
        ) {
            // A bare word `in`/`notin` followed by nothing is still a word.
            let selector = Selector { terms };
            let written = selector.to_string();
            prop_assert_eq!(Selector::parse(&written).unwrap(), selector, "{}", written);
        }
    }
}
