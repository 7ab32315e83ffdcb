//! Typed `name=value` options: what an index reads from [`IndexConfig::extra`].
//!
//! # Declaring
//!
//! An index declares its options once, as an [`Options`] table: each [`Opt`] has a name, the
//! aliases it also answers to, and a type — a number in a range ([`Opt::number`]) or a flag
//! written `0` or `1` ([`Opt::flag`]) or one of a few words ([`Opt::choice`], parsed as the
//! word's position in its list).
//!
//! # Parsing
//!
//! [`Options::parse`] reads every option in the order given and refuses, naming the option:
//!
//! | input | error ([`IndexError::Config`]) |
//! |---|---|
//! | a name nobody declared | `unknown <what> option '<name>' (known: <names in declaration order>)` |
//! | a number that is not one | `option <name>=<value>: not a number` |
//! | a number out of range | `option <name>=<value>: must be in <lo>..=<hi>` |
//! | a flag that is not 0 or 1 | `option <name>=<value>: use 0 or 1` |
//! | a word not in a choice's list | `option <name>=<value>: use <word> or <word>` |
//!
//! What comes back ([`Parsed`]) names each option by its declared name, aliases resolved, in the
//! order given, so an index may let later options override earlier ones or fold them in order.
//! A wrapper that reads a few options and hands the rest to the index it wraps (RDWC)
//! [`strip`](Options::strip)s its own instead: unknown names are left for the inner index.

use std::ops::RangeInclusive;

use dmindex_index::{IndexConfig, IndexError, IndexResult};

/// An option's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A number in this range.
    Number(RangeInclusive<usize>),
    /// `0` or `1`.
    Flag,
    /// One of these words; its value is the word's position (the first is the default an
    /// index documents).
    Choice(&'static [&'static str]),
}

/// One declared option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opt {
    pub name: &'static str,
    /// Other names it answers to (not listed in errors).
    pub aliases: &'static [&'static str],
    pub kind: Kind,
}

impl Opt {
    /// A number in `range`.
    pub const fn number(
        name: &'static str,
        aliases: &'static [&'static str],
        range: RangeInclusive<usize>,
    ) -> Opt {
        Opt { name, aliases, kind: Kind::Number(range) }
    }

    /// A flag: `0` or `1`.
    pub const fn flag(name: &'static str, aliases: &'static [&'static str]) -> Opt {
        Opt { name, aliases, kind: Kind::Flag }
    }

    /// One of `words`, parsed as its position in the list.
    pub const fn choice(
        name: &'static str,
        aliases: &'static [&'static str],
        words: &'static [&'static str],
    ) -> Opt {
        Opt { name, aliases, kind: Kind::Choice(words) }
    }

    fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }

    /// The value of `name=v` (`name` as given, for errors).
    fn value(&self, name: &str, v: &str) -> IndexResult<usize> {
        let bad = |why: &str| IndexError::Config(format!("option {name}={v}: {why}"));
        let n = v.parse::<usize>();
        match &self.kind {
            Kind::Flag => match n {
                Ok(n @ (0 | 1)) => Ok(n),
                _ => Err(bad("use 0 or 1")),
            },
            Kind::Choice(words) => match words.iter().position(|w| *w == v) {
                Some(i) => Ok(i),
                None => Err(bad(&format!("use {}", words.join(" or ")))),
            },
            Kind::Number(range) => {
                let n = n.map_err(|_| bad("not a number"))?;
                if !range.contains(&n) {
                    return Err(bad(&format!("must be in {}..={}", range.start(), range.end())));
                }
                Ok(n)
            }
        }
    }
}

/// The options one index (or wrapper) understands.
#[derive(Clone, Debug)]
pub struct Options {
    /// Who reads them, for errors: `unknown <what> option …`.
    pub what: &'static str,
    pub known: &'static [Opt],
}

/// Options as given, in order, by declared name; flags are 0 or 1.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed(Vec<(&'static str, usize)>);

impl Parsed {
    /// Every option given, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        self.0.iter().copied()
    }

    /// The last value given for number `name`.
    pub fn number(&self, name: &str) -> Option<usize> {
        self.0.iter().rev().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }

    /// The last value given for flag `name`.
    pub fn flag(&self, name: &str) -> Option<bool> {
        self.number(name).map(|v| v == 1)
    }
}

impl Options {
    fn find(&self, name: &str) -> Option<&Opt> {
        self.known.iter().find(|o| o.answers_to(name))
    }

    /// Reads every option in `extra`; an unknown name or a bad value is an error naming it.
    pub fn parse(&self, extra: &[(String, String)]) -> IndexResult<Parsed> {
        let mut out = Vec::with_capacity(extra.len());
        for (k, v) in extra {
            let Some(opt) = self.find(k) else {
                let known: Vec<&str> = self.known.iter().map(|o| o.name).collect();
                return Err(IndexError::Config(format!(
                    "unknown {} option '{k}' (known: {})",
                    self.what,
                    known.join(", ")
                )));
            };
            out.push((opt.name, opt.value(k, v)?));
        }
        Ok(Parsed(out))
    }

    /// Takes the options declared here out of `cfg`: returns them and `cfg` with the others
    /// only, in their order (for the index behind a wrapper).
    pub fn strip(&self, cfg: &IndexConfig) -> IndexResult<(Parsed, IndexConfig)> {
        let mut mine = Vec::new();
        let mut rest = IndexConfig { extra: Vec::new(), ..cfg.clone() };
        for (k, v) in &cfg.extra {
            match self.find(k) {
                Some(opt) => mine.push((opt.name, opt.value(k, v)?)),
                None => rest.extra.push((k.clone(), v.clone())),
            }
        }
        Ok((Parsed(mine), rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: Options = Options {
        what: "TEST",
        known: &[
            Opt::number("span", &[], 0..=usize::MAX),
            Opt::number("fanout", &["f"], 4..=1024),
            Opt::flag("fast", &["quick"]),
            Opt::choice("mode", &[], &["plain", "fancy"]),
        ],
    };

    fn extra(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn err(kv: &[(&str, &str)]) -> String {
        match OPTS.parse(&extra(kv)) {
            Err(IndexError::Config(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn values_come_back_in_order_by_declared_name() {
        let p = OPTS
            .parse(&extra(&[
                ("f", "8"),
                ("quick", "1"),
                ("fanout", "16"),
                ("span", "0"),
                ("mode", "fancy"),
            ]))
            .unwrap();
        assert_eq!(
            p.iter().collect::<Vec<_>>(),
            [("fanout", 8), ("fast", 1), ("fanout", 16), ("span", 0), ("mode", 1)]
        );
        assert_eq!(
            (p.number("fanout"), p.flag("fast"), p.flag("nope")),
            (Some(16), Some(true), None)
        );
    }

    #[test]
    fn errors_name_the_option_and_the_known_ones() {
        assert_eq!(
            err(&[("nope", "1")]),
            "unknown TEST option 'nope' (known: span, fanout, fast, mode)"
        );
        assert_eq!(err(&[("f", "x")]), "option f=x: not a number");
        assert_eq!(err(&[("fanout", "3")]), "option fanout=3: must be in 4..=1024");
        assert_eq!(err(&[("fast", "2")]), "option fast=2: use 0 or 1");
        assert_eq!(err(&[("quick", "yes")]), "option quick=yes: use 0 or 1");
        assert_eq!(err(&[("mode", "1")]), "option mode=1: use plain or fancy");
    }

    #[test]
    fn strip_keeps_the_rest_in_order() {
        let cfg = IndexConfig {
            max_key: 16,
            extra: extra(&[("a", "1"), ("fast", "0"), ("b", "x")]),
            ..IndexConfig::default()
        };
        let (mine, rest) = OPTS.strip(&cfg).unwrap();
        assert_eq!(mine.flag("fast"), Some(false));
        assert_eq!(rest, IndexConfig { extra: extra(&[("a", "1"), ("b", "x")]), ..cfg.clone() });
        let bad = IndexConfig { extra: extra(&[("fast", "7")]), ..cfg };
        assert!(matches!(OPTS.strip(&bad), Err(IndexError::Config(m)) if m.contains("fast=7")));
    }
}
