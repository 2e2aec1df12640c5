//! BNF grammars in the PonyGE2 notation the paper uses: parsing, plus the analyses that
//! mapping and initialisation rely on (reachability, termination, recursion, minimum
//! depth). Must never interpret what the derived text means: terminals are opaque text.
//!
//! Notation:
//! - `<name> ::= alt1 | alt2` starts a rule; a line beginning with `|` (or any other
//!   non-comment line) continues the rule above. Line breaks inside an alternative are
//!   kept as `\n`.
//! - `<` opens a nonterminal only when followed by `[A-Za-z0-9_-]+>`; otherwise it is
//!   literal text, so `i < LENINPUT` works.
//! - Escapes: `#lesser#` → `<`, `#greater#` → `>`, `#or#` → `|`, `#nl#` → newline.
//! - `#param#` is a free parameter ([`Symbol::Param`]): each one a derivation emits becomes the
//!   next slot of the program's parameter array, `p[0]`, `p[1]`, ..., whose values are fitted
//!   and belong to the individual.
//!   Double-quoted text is literal (`"|"`), quotes removed; it must close on its line.
//! - Spacing inside an alternative is kept exactly; only its two ends are trimmed.
//! - Whole-line comments start with `# ` (or are a lone `#`) or with `//`.

use std::collections::{HashMap, HashSet};

/// Index of a rule within its grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(usize);

impl RuleId {
    /// Position of the rule in [`Grammar::rules`].
    pub fn index(self) -> usize {
        self.0
    }
}

/// One symbol of an alternative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Symbol {
    /// Literal text copied into the phenotype.
    Terminal(String),
    /// A rule to expand.
    Nonterminal(RuleId),
    /// A free parameter (`#param#`): the mapping emits `p[k]`, k counting the parameters
    /// emitted before it.
    Param,
}

impl Symbol {
    /// The rule this symbol expands, if it is a nonterminal.
    pub fn nonterminal(&self) -> Option<RuleId> {
        match self {
            Symbol::Nonterminal(id) => Some(*id),
            Symbol::Terminal(_) | Symbol::Param => None,
        }
    }
}

/// One production of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alternative {
    symbols: Vec<Symbol>,
    recursive: bool,
    min_depth: Option<u32>,
}

impl Alternative {
    /// The symbols, left to right.
    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }

    /// True when one of its nonterminals can derive the rule that owns this alternative.
    pub fn is_recursive(&self) -> bool {
        self.recursive
    }

    /// Depth of the shallowest finite derivation tree rooted at the owning rule that uses
    /// this alternative at the root (root counts 1); `None` if it can never terminate.
    pub fn min_depth(&self) -> Option<u32> {
        self.min_depth
    }
}

/// A named rule and its alternatives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    name: String,
    line: usize,
    alternatives: Vec<Alternative>,
    min_depth: Option<u32>,
}

impl Rule {
    /// Name without angle brackets.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// 1-based line of the rule's `::=` in the source.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The productions, in source order (the order codons index).
    pub fn alternatives(&self) -> &[Alternative] {
        &self.alternatives
    }

    /// Depth of its shallowest finite derivation tree; `None` if it can never terminate.
    pub fn min_depth(&self) -> Option<u32> {
        self.min_depth
    }

    /// True if some finite derivation from this rule exists.
    pub fn can_terminate(&self) -> bool {
        self.min_depth.is_some()
    }
}

/// A parsed grammar with its start rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grammar {
    rules: Vec<Rule>,
    start: RuleId,
    by_name: HashMap<String, RuleId>,
    /// Whether some alternative holds `#param#` (found once, when parsed: renderers and
    /// launches ask for every kernel).
    params: bool,
}

/// What is wrong with a grammar text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// No rule at all.
    #[error("the grammar has no rules: write at least one `<name> ::= ...` line")]
    NoRules,
    /// Non-comment text appears before the first rule.
    #[error(
        "line {line}: text before the first rule: start with a `<name> ::= ...` line, or comment the text out with `# `"
    )]
    TextBeforeFirstRule { line: usize },
    /// A line that means to start a rule but whose `<name>` is not one (unclosed, or with
    /// characters a name cannot hold).
    #[error(
        "line {line}: not a rule head: a rule starts `<name> ::=`, its name of letters, digits, `_` and `-` between `<` and `>`"
    )]
    BadRuleHead { line: usize },
    /// A nonterminal is used but has no rule.
    #[error(
        "line {line}: `<{name}>` is used but never defined: add a `<{name}> ::= ...` rule or fix the name"
    )]
    UndefinedNonterminal { name: String, line: usize },
    /// Two rules share a name.
    #[error(
        "line {line}: rule `<{name}>` is defined again (first at line {first_line}): merge the alternatives into one rule"
    )]
    DuplicateRule { name: String, line: usize, first_line: usize },
    /// A rule with nothing after `::=`.
    #[error("line {line}: rule `<{name}>` has no alternatives: give it at least one after `::=`")]
    EmptyRule { name: String, line: usize },
    /// Nothing between two `|`, or a trailing `|`.
    #[error(
        "line {line}: rule `<{name}>` has an empty alternative: remove the extra `|`, or write `\"\"` for an intentionally empty one"
    )]
    EmptyAlternative { name: String, line: usize },
    /// A `"` without its closing partner on the same line.
    #[error("line {line}: unterminated double quote: close the quoted terminal on the same line")]
    UnterminatedQuote { line: usize },
    /// The requested start rule does not exist.
    #[error("start rule `<{name}>` is not defined in the grammar: pick one of its rules")]
    UnknownStart { name: String },
}

/// Escapes recognised anywhere outside quotes.
/// The escape of a free parameter ([`Symbol::Param`]).
pub const PARAM_ESCAPE: &str = "#param#";

const ESCAPES: [(&str, &str); 4] = [("#lesser#", "<"), ("#greater#", ">"), ("#or#", "|"), ("#nl#", "\n")];

impl Grammar {
    /// Parses `text`; the first rule is the start rule.
    pub fn parse(text: &str) -> Result<Grammar, GrammarError> {
        Self::parse_with_start(text, None)
    }

    /// Parses `text` with an explicit start rule name (without angle brackets).
    pub fn parse_with_start(text: &str, start: Option<&str>) -> Result<Grammar, GrammarError> {
        let raw = split_rules(text)?;
        if raw.is_empty() {
            return Err(GrammarError::NoRules);
        }
        let mut by_name: HashMap<String, RuleId> = HashMap::new();
        for (i, r) in raw.iter().enumerate() {
            if let Some(first) = by_name.get(&r.name) {
                return Err(GrammarError::DuplicateRule {
                    name: r.name.clone(),
                    line: r.line,
                    first_line: raw[first.0].line,
                });
            }
            by_name.insert(r.name.clone(), RuleId(i));
        }
        let mut rules = Vec::with_capacity(raw.len());
        for r in &raw {
            let mut alternatives = Vec::new();
            for alt in parse_alternatives(r)? {
                let mut symbols = Vec::with_capacity(alt.len());
                for piece in alt {
                    match piece {
                        Resolved::Text(t) => symbols.push(Symbol::Terminal(t)),
                        Resolved::Param => symbols.push(Symbol::Param),
                        Resolved::Nt { name, line } => match by_name.get(&name) {
                            Some(id) => symbols.push(Symbol::Nonterminal(*id)),
                            None => {
                                return Err(GrammarError::UndefinedNonterminal { name, line });
                            }
                        },
                    }
                }
                alternatives.push(Alternative { symbols, recursive: false, min_depth: None });
            }
            rules.push(Rule { name: r.name.clone(), line: r.line, alternatives, min_depth: None });
        }
        let start = match start {
            None => RuleId(0),
            Some(name) => *by_name
                .get(name.trim_start_matches('<').trim_end_matches('>'))
                .ok_or_else(|| GrammarError::UnknownStart { name: name.to_string() })?,
        };
        let params = rules.iter().flat_map(|r| &r.alternatives).any(|a| a.symbols.contains(&Symbol::Param));
        let mut grammar = Grammar { rules, start, by_name, params };
        grammar.analyse();
        Ok(grammar)
    }

    /// The start rule.
    pub fn start(&self) -> RuleId {
        self.start
    }

    /// All rules in source order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule with this id.
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id.0]
    }

    /// Looks a rule up by name (without angle brackets).
    pub fn rule_id(&self, name: &str) -> Option<RuleId> {
        self.by_name.get(name).copied()
    }

    /// Names of rules that cannot be reached from the start rule, in source order.
    pub fn unreachable_rules(&self) -> Vec<&str> {
        let reach = self.reachable_from(self.start);
        self.rules
            .iter()
            .enumerate()
            .filter(|(i, _)| !reach.contains(&RuleId(*i)))
            .map(|(_, r)| r.name.as_str())
            .collect()
    }

    /// Names of rules with no finite derivation, in source order.
    pub fn non_terminating_rules(&self) -> Vec<&str> {
        self.rules.iter().filter(|r| !r.can_terminate()).map(|r| r.name.as_str()).collect()
    }

    /// Whether some alternative holds a free parameter (`#param#`).
    pub fn has_params(&self) -> bool {
        self.params
    }

    /// The largest number of alternatives of any rule: codons below this cannot reach
    /// every alternative.
    pub fn max_alternatives(&self) -> usize {
        self.rules.iter().map(|r| r.alternatives.len()).max().unwrap_or(0)
    }

    fn reachable_from(&self, from: RuleId) -> HashSet<RuleId> {
        let mut seen = HashSet::from([from]);
        let mut todo = vec![from];
        while let Some(id) = todo.pop() {
            for alt in &self.rules[id.0].alternatives {
                for n in alt.symbols.iter().filter_map(Symbol::nonterminal) {
                    if seen.insert(n) {
                        todo.push(n);
                    }
                }
            }
        }
        seen
    }

    fn analyse(&mut self) {
        // Minimum depths by fixpoint: values only ever shrink, and each is bounded below
        // by 1, so this terminates.
        loop {
            let mut changed = false;
            for r in 0..self.rules.len() {
                for a in 0..self.rules[r].alternatives.len() {
                    let mut depth = Some(1u32);
                    for s in &self.rules[r].alternatives[a].symbols {
                        if let Symbol::Nonterminal(n) = s {
                            depth = match (depth, self.rules[n.0].min_depth) {
                                (Some(d), Some(c)) => Some(d.max(c.saturating_add(1))),
                                _ => None,
                            };
                        }
                    }
                    let alt = &mut self.rules[r].alternatives[a];
                    if depth.is_some() && (alt.min_depth.is_none() || depth < alt.min_depth) {
                        alt.min_depth = depth;
                        changed = true;
                    }
                }
                let best = self.rules[r].alternatives.iter().filter_map(|a| a.min_depth).min();
                if best != self.rules[r].min_depth {
                    self.rules[r].min_depth = best;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let reach: Vec<HashSet<RuleId>> =
            (0..self.rules.len()).map(|i| self.reachable_from(RuleId(i))).collect();
        for r in 0..self.rules.len() {
            for alt in &mut self.rules[r].alternatives {
                alt.recursive = alt.symbols.iter().any(|s| match s {
                    Symbol::Nonterminal(n) => reach[n.0].contains(&RuleId(r)),
                    Symbol::Terminal(_) | Symbol::Param => false,
                });
            }
        }
    }
}

/// A rule's name and its body lines, before alternatives are split.
struct RawRule {
    name: String,
    line: usize,
    body: Vec<(usize, String)>,
}

fn is_comment(trimmed: &str) -> bool {
    trimmed == "#" || trimmed.starts_with("# ") || trimmed.starts_with("#\t") || trimmed.starts_with("//")
}

/// If `trimmed` starts with `<name> ::=`, returns the name and the text after `::=`.
fn rule_head(trimmed: &str) -> Option<(&str, &str)> {
    let rest = trimmed.strip_prefix('<')?;
    let close = rest.find('>')?;
    let name = &rest[..close];
    if !is_nt_name(name) {
        return None;
    }
    let body = rest[close + 1..].trim_start().strip_prefix("::=")?;
    Some((name, body))
}

fn is_nt_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The name of the nonterminal `<name>` at the start of `s`, if one starts there.
fn nonterminal_at(s: &str) -> Option<&str> {
    let rest = s.strip_prefix('<')?;
    let close = rest.find('>')?;
    let name = &rest[..close];
    is_nt_name(name).then_some(name)
}

fn split_rules(text: &str) -> Result<Vec<RawRule>, GrammarError> {
    let mut rules: Vec<RawRule> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if trimmed.trim_end().is_empty() || is_comment(trimmed) {
            continue;
        }
        if let Some((name, body)) = rule_head(trimmed) {
            rules.push(RawRule { name: name.to_string(), line: n, body: vec![(n, body.to_string())] });
        } else if trimmed.starts_with('<') && trimmed.contains("::=") {
            return Err(GrammarError::BadRuleHead { line: n });
        } else if let Some(r) = rules.last_mut() {
            r.body.push((n, line.to_string()));
        } else {
            return Err(GrammarError::TextBeforeFirstRule { line: n });
        }
    }
    Ok(rules)
}

/// A piece of an alternative before trimming: `protected` text (quoted or escaped) is
/// never trimmed.
enum Piece {
    Text { text: String, protected: bool },
    Nt { name: String, line: usize },
    Param,
}

/// An alternative's symbol before names are resolved.
enum Resolved {
    Text(String),
    Nt { name: String, line: usize },
    Param,
}

fn parse_alternatives(rule: &RawRule) -> Result<Vec<Vec<Resolved>>, GrammarError> {
    if rule.body.iter().all(|(_, t)| t.trim().is_empty()) {
        return Err(GrammarError::EmptyRule { name: rule.name.clone(), line: rule.line });
    }
    // Each alternative remembers the line it starts on, for error messages.
    let mut alts: Vec<(usize, Vec<Piece>)> = vec![(rule.line, Vec::new())];
    for (k, (line, text)) in rule.body.iter().enumerate() {
        if k > 0 {
            push_text(&mut alts, "\n", false);
        }
        let mut rest = text.as_str();
        while let Some(c) = rest.chars().next() {
            if c == '|' {
                alts.push((*line, Vec::new()));
                rest = &rest[1..];
            } else if c == '"' {
                let Some(end) = rest[1..].find('"') else {
                    return Err(GrammarError::UnterminatedQuote { line: *line });
                };
                push_text(&mut alts, &rest[1..1 + end], true);
                // An empty quoted string still marks the alternative as non-empty.
                if let (0, Some((_, pieces))) = (end, alts.last_mut()) {
                    pieces.push(Piece::Text { text: String::new(), protected: true });
                }
                rest = &rest[end + 2..];
            } else if let Some(name) = nonterminal_at(rest) {
                if let Some((_, pieces)) = alts.last_mut() {
                    pieces.push(Piece::Nt { name: name.to_string(), line: *line });
                }
                rest = &rest[name.len() + 2..];
            } else if let Some(after) = rest.strip_prefix(PARAM_ESCAPE) {
                if let Some((_, pieces)) = alts.last_mut() {
                    pieces.push(Piece::Param);
                }
                rest = after;
            } else if let Some((esc, lit)) = ESCAPES.iter().find(|(e, _)| rest.starts_with(e)) {
                push_text(&mut alts, lit, true);
                rest = &rest[esc.len()..];
            } else {
                let len = c.len_utf8();
                push_text(&mut alts, &rest[..len], false);
                rest = &rest[len..];
            }
        }
    }
    let mut out = Vec::with_capacity(alts.len());
    for (line, pieces) in alts {
        let pieces = trim_ends(pieces);
        if pieces.is_empty() {
            return Err(GrammarError::EmptyAlternative { name: rule.name.clone(), line });
        }
        let mut resolved: Vec<Resolved> = Vec::new();
        for p in pieces {
            match p {
                Piece::Text { text, .. } => match resolved.last_mut() {
                    Some(Resolved::Text(t)) => t.push_str(&text),
                    _ => resolved.push(Resolved::Text(text)),
                },
                Piece::Nt { name, line } => resolved.push(Resolved::Nt { name, line }),
                Piece::Param => resolved.push(Resolved::Param),
            }
        }
        resolved.retain(|r| !matches!(r, Resolved::Text(t) if t.is_empty()));
        out.push(resolved);
    }
    Ok(out)
}

fn push_text(alts: &mut [(usize, Vec<Piece>)], s: &str, protected: bool) {
    let Some((_, pieces)) = alts.last_mut() else {
        return;
    };
    if s.is_empty() {
        return;
    }
    match pieces.last_mut() {
        Some(Piece::Text { text, protected: p }) if *p == protected => text.push_str(s),
        _ => pieces.push(Piece::Text { text: s.to_string(), protected }),
    }
}

/// Trims whitespace at the two ends of an alternative, leaving protected text intact.
fn trim_ends(mut pieces: Vec<Piece>) -> Vec<Piece> {
    while let Some(Piece::Text { text, protected: false }) = pieces.first_mut() {
        let t = text.trim_start();
        if t.is_empty() {
            pieces.remove(0);
        } else {
            *text = t.to_string();
            break;
        }
    }
    while let Some(Piece::Text { text, protected: false }) = pieces.last_mut() {
        let t = text.trim_end();
        if t.is_empty() {
            pieces.pop();
        } else {
            *text = t.to_string();
            break;
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terminals(g: &Grammar, rule: &str) -> Vec<String> {
        let id = g.rule_id(rule).unwrap();
        g.rule(id)
            .alternatives()
            .iter()
            .map(|a| {
                a.symbols()
                    .iter()
                    .map(|s| match s {
                        Symbol::Terminal(t) => t.clone(),
                        Symbol::Nonterminal(n) => format!("<{}>", g.rule(*n).name()),
                        Symbol::Param => "#param#".to_owned(),
                    })
                    .collect::<String>()
            })
            .collect()
    }

    #[test]
    fn alternatives_split_on_bars_and_keep_inner_spacing() {
        let g = Grammar::parse("<e> ::=  <e>  +  x |x|  y z  ").unwrap();
        assert_eq!(terminals(&g, "e"), ["<e>  +  x", "x", "y z"]);
    }

    #[test]
    fn lines_starting_with_a_bar_continue_the_rule() {
        let g = Grammar::parse("<a> ::= x\n   | y\n| z\n<b> ::= w").unwrap();
        assert_eq!(terminals(&g, "a"), ["x", "y", "z"]);
        assert_eq!(terminals(&g, "b"), ["w"]);
    }

    #[test]
    fn less_than_followed_by_space_is_literal() {
        let g = Grammar::parse("<a> ::= i < LEN | <b>\n<b> ::= 1").unwrap();
        assert_eq!(terminals(&g, "a"), ["i < LEN", "<b>"]);
    }

    #[test]
    fn escapes_and_quotes_produce_literal_symbols() {
        let g = Grammar::parse("<a> ::= #lesser# | #greater# | #or# | \"|\" | a\"  \"b").unwrap();
        assert_eq!(terminals(&g, "a"), ["<", ">", "|", "|", "a  b"]);
    }

    #[test]
    fn a_param_escape_is_a_symbol_of_its_own_inside_text() {
        let g = Grammar::parse("<a> ::= x * #param# | 1\n<b> ::= <a>").unwrap();
        let a = g.rule(g.rule_id("a").unwrap());
        assert_eq!(a.alternatives()[0].symbols(), [Symbol::Terminal("x * ".into()), Symbol::Param]);
        assert_eq!(terminals(&g, "a"), ["x * #param#", "1"]);
        assert!(g.has_params());
        assert!(!Grammar::parse("<a> ::= x | #lesser#").unwrap().has_params());
    }

    #[test]
    fn quoted_spaces_at_the_ends_survive_trimming() {
        let g = Grammar::parse("<a> ::= \" x \" | \"\"").unwrap();
        assert_eq!(terminals(&g, "a"), [" x ", ""]);
    }

    #[test]
    fn comments_are_ignored() {
        let g = Grammar::parse("# a comment\n// another\n<a> ::= x\n#\n| y").unwrap();
        assert_eq!(terminals(&g, "a"), ["x", "y"]);
    }

    #[test]
    fn undefined_nonterminal_reports_its_line() {
        let err = Grammar::parse("<a> ::= x\n| <b>").unwrap_err();
        assert_eq!(err, GrammarError::UndefinedNonterminal { name: "b".into(), line: 2 });
    }

    #[test]
    fn duplicate_rule_reports_both_lines() {
        let err = Grammar::parse("<a> ::= x\n<a> ::= y").unwrap_err();
        assert_eq!(err, GrammarError::DuplicateRule { name: "a".into(), line: 2, first_line: 1 });
    }

    #[test]
    fn empty_rule_and_empty_alternative_are_errors() {
        assert_eq!(
            Grammar::parse("<a> ::=   ").unwrap_err(),
            GrammarError::EmptyRule { name: "a".into(), line: 1 }
        );
        assert!(matches!(
            Grammar::parse("<a> ::= x | | y").unwrap_err(),
            GrammarError::EmptyAlternative { .. }
        ));
        assert!(matches!(Grammar::parse("<a> ::= x |").unwrap_err(), GrammarError::EmptyAlternative { .. }));
    }

    #[test]
    fn no_rules_and_stray_text_are_errors() {
        assert_eq!(Grammar::parse("# only\n\n").unwrap_err(), GrammarError::NoRules);
        assert_eq!(
            Grammar::parse("hello\n<a> ::= x").unwrap_err(),
            GrammarError::TextBeforeFirstRule { line: 1 }
        );
    }

    #[test]
    fn a_rule_head_with_an_unclosed_name_is_an_error() {
        assert_eq!(
            Grammar::parse("<e> ::= x + <e2> | x\n<e2 ::= x").unwrap_err(),
            GrammarError::BadRuleHead { line: 2 }
        );
        assert_eq!(
            Grammar::parse("<e> ::= x\n<my rule> ::= y").unwrap_err(),
            GrammarError::BadRuleHead { line: 2 }
        );
        // A continuation line that starts with a nonterminal is still one.
        assert!(Grammar::parse("<e> ::= x\n  | <e> + x").is_ok());
    }

    #[test]
    fn unterminated_quote_is_an_error() {
        assert_eq!(
            Grammar::parse("<a> ::= x\n| \"y").unwrap_err(),
            GrammarError::UnterminatedQuote { line: 2 }
        );
    }

    #[test]
    fn start_defaults_to_first_rule_and_can_be_chosen() {
        let text = "<a> ::= <b>\n<b> ::= x";
        assert_eq!(Grammar::parse(text).unwrap().start(), RuleId(0));
        let g = Grammar::parse_with_start(text, Some("b")).unwrap();
        assert_eq!(g.rule(g.start()).name(), "b");
        assert!(matches!(Grammar::parse_with_start(text, Some("c")), Err(GrammarError::UnknownStart { .. })));
    }

    #[test]
    fn unreachable_and_non_terminating_rules_are_found() {
        let g = Grammar::parse("<a> ::= <b> | x\n<b> ::= <b> y\n<c> ::= z").unwrap();
        assert_eq!(g.unreachable_rules(), ["c"]);
        assert_eq!(g.non_terminating_rules(), ["b"]);
        assert!(g.rule(g.start()).can_terminate());
    }

    #[test]
    fn recursion_and_min_depth_follow_the_derivations() {
        let g = Grammar::parse("<e> ::= <e> + <t> | <t>\n<t> ::= x | (<e>)").unwrap();
        let e = g.rule(g.rule_id("e").unwrap());
        let t = g.rule(g.rule_id("t").unwrap());
        assert!(e.alternatives()[0].is_recursive());
        // <e> ::= <t> is recursive too: <t> can derive (<e>).
        assert!(e.alternatives()[1].is_recursive());
        assert!(!t.alternatives()[0].is_recursive());
        assert_eq!(t.min_depth(), Some(1));
        assert_eq!(e.min_depth(), Some(2));
        assert_eq!(e.alternatives()[0].min_depth(), Some(3));
    }
}
