//! `cargo xtask layout`: the source layout of the library crates (`crates/*/src`), checked.
//!
//! Two rules, so that a reader finds an item's file from its name and reads a crate from the
//! bottom up:
//!
//! - **No file over [`MAX_LINES`] lines.** Files under a `tests/` directory and files named
//!   `tests.rs` are exempt; a test module inside a file counts with it (move it out to
//!   `tests.rs` if that is what pushes the file over).
//! - **No import cycles between the files of a crate.** Each file is a layer over the files it
//!   uses; files that use each other in a circle (a strongly connected component of more than
//!   one file) are reported with the references that close it. Break one by moving the shared
//!   items down into the file that owns them, or into a new file below both.
//!
//! # What counts as a reference
//!
//! An edge goes from a file to the file an item it names lives in, for paths starting with
//! `crate::` or `super::`, in `use` trees (`use crate::{a::B, C}`) and in code
//! (`crate::metrics::ON`). A path is resolved along the crate's module tree (`mod` items,
//! inline modules and `foo.rs` / `foo/mod.rs` files): a name that is not a module is looked
//! up among the `use` items of the module reached, so `crate::Name` re-exported by
//! `pub use module::Name` in `lib.rs` leads to `module`'s file; anything else is an item of
//! that module's own file. A child's `super::` reference to its parent is an edge to the
//! parent's file.
//!
//! Not edges: a parent's `mod child;`, and its relative paths into its own children
//! (`pub use child::Name`), since a parent owns and re-exports its children as `lib.rs` does;
//! `self::` paths; `$crate` in macros; paths in comments and strings; and everything inside an
//! item marked `#[cfg(test)]` (a `mod tests` block, a test helper, a test-only file), since
//! tests may reach up.
//!
//! Not seen either: calls of methods that an `impl` block in another file adds to a type (the
//! caller names no path to that file). Keep a type's methods with it, or give the shared
//! state a file of its own, so such an `impl` only reaches down.
//!
//! Dependency-free: a lexer that knows comments, strings and the shape of `mod` and `use`
//! items, not a Rust parser.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs;
use std::path::Path;

use crate::root;

/// The most lines a library source file may have.
pub(crate) const MAX_LINES: usize = 800;

/// Checks every crate under `crates/`; fails naming each file over the limit and each cycle.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err("usage: cargo xtask layout".into());
    }
    let root = root();
    let crates_dir = root.join("crates");
    let mut crates: Vec<_> = fs::read_dir(&crates_dir)
        .map_err(|e| format!("cannot list {}: {e}", crates_dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.join("src").is_dir())
        .collect();
    crates.sort();
    let (mut problems, mut files) = (0, 0);
    for krate in &crates {
        let src = krate.join("src");
        let shown = src
            .strip_prefix(&root)
            .unwrap_or(&src)
            .display()
            .to_string();
        let mut sources = Vec::new();
        list_sources(&src, "", &mut sources)?;
        files += sources.len();
        for rel in &sources {
            if is_exempt(rel) {
                continue;
            }
            let text = fs::read_to_string(src.join(rel))
                .map_err(|e| format!("cannot read {shown}/{rel}: {e}"))?;
            let lines = text.lines().count();
            if lines > MAX_LINES {
                problems += 1;
                println!("{shown}/{rel}: {lines} lines, over the limit of {MAX_LINES}");
            }
        }
        let read = |rel: &str| fs::read_to_string(src.join(rel)).ok();
        let mut seen = BTreeSet::new();
        for crate_root in ["lib.rs", "main.rs"] {
            if !src.join(crate_root).is_file() {
                continue;
            }
            for cycle in CrateGraph::load(crate_root, &read).cycles() {
                if !seen.insert(cycle.files.clone()) {
                    continue;
                }
                problems += 1;
                println!(
                    "{shown}: {} files import each other in a circle: {}",
                    cycle.files.len(),
                    cycle.files.join(", ")
                );
                println!("    cycle: {}", cycle.path.join(" -> "));
                for reference in &cycle.references {
                    println!("    {reference}");
                }
            }
        }
    }
    if problems == 0 {
        println!("layout: ok ({} crates, {files} source files)", crates.len());
        Ok(())
    } else {
        Err(format!("layout: {problems} problem(s), listed above"))
    }
}

/// Every `.rs` file under `dir`, as paths relative to the crate's `src` (`/`-separated).
fn list_sources(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), String> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if entry.path().is_dir() {
            list_sources(&entry.path(), &path, out)?;
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// True for a file the line limit does not apply to: under a `tests/` directory, or named
/// `tests.rs`.
fn is_exempt(rel: &str) -> bool {
    let mut parts: Vec<&str> = rel.split('/').collect();
    let file = parts.pop().unwrap_or_default();
    file == "tests.rs" || parts.contains(&"tests")
}

// ----------------------------------------------------------------------------------------
// Lexing

/// A token of Rust source, with comments, literals and lifetimes left out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// An identifier or keyword (a raw identifier without its `r#`).
    Ident(String),
    /// `::`.
    PathSep,
    /// A string literal's contents (kept for `#[path = "..."]`).
    Str(String),
    /// Any other character (`{`, `;`, `#`, `$`, ...).
    Punct(char),
}

/// A token and the line it starts on (1-based).
#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// Splits `src` into tokens; comments, numbers, char literals and lifetimes produce none.
fn lex(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let is_ident_start = |ch: char| ch == '_' || ch.is_alphabetic();
    let is_ident = |ch: char| ch == '_' || ch.is_alphanumeric();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            let start = line;
            let (text, next) = quoted(&c, i + 1, &mut line);
            out.push(Token {
                tok: Tok::Str(text),
                line: start,
            });
            i = next;
        } else if ch == '\'' {
            // A char literal ('a', '\n', '\u{1F600}', '\'') or a lifetime / label ('a, 'static).
            if at(i + 1) == '\\' {
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
        } else if is_ident_start(ch) {
            let start = i;
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let prefix = matches!(word.as_str(), "r" | "b" | "br" | "c" | "cr");
            if prefix && at(i) == '\'' && word == "b" {
                // A byte literal: b'x', b'\''.
                i += if at(i + 1) == '\\' { 3 } else { 2 };
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if prefix && at(i) == '"' && !word.contains('r') {
                let start = line;
                let (text, next) = quoted(&c, i + 1, &mut line);
                out.push(Token {
                    tok: Tok::Str(text),
                    line: start,
                });
                i = next;
            } else if word.ends_with('r') && prefix && (at(i) == '"' || at(i) == '#') {
                let mut hashes = 0;
                while at(i + hashes) == '#' {
                    hashes += 1;
                }
                if at(i + hashes) == '"' {
                    // A raw string: r"..", r#".."#, br##".."##.
                    let start = line;
                    i += hashes + 1;
                    let from = i;
                    while i < c.len() {
                        if c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                            break;
                        }
                        if c[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                    out.push(Token {
                        tok: Tok::Str(c[from..i.min(c.len())].iter().collect()),
                        line: start,
                    });
                    i += hashes + 1;
                } else if word == "r" && hashes == 1 && is_ident_start(at(i + 1)) {
                    // A raw identifier: r#type.
                    let from = i + 1;
                    i = from;
                    while i < c.len() && is_ident(c[i]) {
                        i += 1;
                    }
                    out.push(Token {
                        tok: Tok::Ident(c[from..i].iter().collect()),
                        line,
                    });
                } else {
                    out.push(Token {
                        tok: Tok::Ident(word),
                        line,
                    });
                }
            } else {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

/// The contents of a string literal whose opening quote is just before `i`, and the index past
/// its closing quote.
fn quoted(c: &[char], mut i: usize, line: &mut usize) -> (String, usize) {
    let mut text = String::new();
    while i < c.len() && c[i] != '"' {
        if c[i] == '\\' {
            i += 1;
        }
        if let Some(&ch) = c.get(i) {
            if ch == '\n' {
                *line += 1;
            }
            text.push(ch);
        }
        i += 1;
    }
    (text, i + 1)
}

// ----------------------------------------------------------------------------------------
// Items

/// A path named in a module, as written (`["crate", "a", "B"]`).
#[derive(Debug, Clone)]
struct PathRef {
    segs: Vec<String>,
    line: usize,
    /// For a leaf of a `use` tree: the name it binds in the module (`None` for a glob or `_`).
    binds: Option<String>,
    glob: bool,
}

/// What one module's source (a file, or an inline module in one) declares and names.
#[derive(Debug, Default)]
struct ParsedModule {
    /// `#![cfg(test)]`: the whole module is test code.
    test: bool,
    /// `mod name;`: (name, marked `#[cfg(test)]`, `#[path]`).
    files: Vec<(String, bool, Option<String>)>,
    /// `mod name { .. }` outside test code.
    inline: Vec<(String, ParsedModule)>,
    /// Leaves of `use` trees.
    uses: Vec<PathRef>,
    /// `crate::` and `super::` paths in code.
    paths: Vec<PathRef>,
}

/// Attributes seen before the next item.
#[derive(Default)]
struct Pending {
    cfg_test: bool,
    path: Option<String>,
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self, ahead: usize) -> Option<&Tok> {
        self.toks.get(self.pos + ahead).map(|t| &t.tok)
    }

    fn is(&self, ahead: usize, punct: char) -> bool {
        self.peek(ahead) == Some(&Tok::Punct(punct))
    }

    fn ident(&self, ahead: usize) -> Option<&str> {
        match self.peek(ahead) {
            Some(Tok::Ident(word)) => Some(word),
            _ => None,
        }
    }

    fn line(&self) -> usize {
        self.toks.get(self.pos).map_or(0, |t| t.line)
    }

    /// Skips from an opening `(`, `[` or `{` at `pos` past its match.
    fn skip_group(&mut self) {
        let mut depth = 0usize;
        while let Some(tok) = self.peek(0).cloned() {
            self.pos += 1;
            match tok {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(')' | ']' | '}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// Skips one item or statement: up to a `;` outside brackets, or past a `{ .. }` block
    /// (and a `;` right after it).
    fn skip_item(&mut self) {
        let mut depth = 0usize;
        while let Some(tok) = self.peek(0) {
            match tok {
                Tok::Punct('(' | '[') => depth += 1,
                Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
                Tok::Punct(';') if depth == 0 => {
                    self.pos += 1;
                    return;
                }
                Tok::Punct('{') if depth == 0 => {
                    self.skip_group();
                    if self.is(0, ';') {
                        self.pos += 1;
                    }
                    return;
                }
                Tok::Punct('}') if depth == 0 => return,
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// An attribute from its `#`: whether it is `cfg(test)`, and a `path = ".."`.
    fn attribute(&mut self, pending: &mut Pending, module: &mut ParsedModule) {
        let inner = self.is(1, '!');
        self.pos += if inner { 2 } else { 1 };
        let start = self.pos;
        self.skip_group();
        let body: Vec<&Tok> = self.toks[start..self.pos].iter().map(|t| &t.tok).collect();
        let word = |w: &str| Tok::Ident(w.to_owned());
        let cfg_test = body.len() == 6
            && body[1] == &word("cfg")
            && body[2] == &Tok::Punct('(')
            && body[3] == &word("test")
            && body[4] == &Tok::Punct(')');
        if inner {
            module.test |= cfg_test;
            return;
        }
        pending.cfg_test |= cfg_test;
        if let [_, Tok::Ident(path), Tok::Punct('='), Tok::Str(file), _] = body.as_slice() {
            if path == "path" {
                pending.path = Some(file.clone());
            }
        }
    }

    /// The items of a module up to its closing `}` (or the end of the file).
    fn module(&mut self) -> ParsedModule {
        let mut module = ParsedModule::default();
        let mut pending = Pending::default();
        let mut depth = 0usize;
        while let Some(tok) = self.peek(0).cloned() {
            match tok {
                Tok::Punct('#') if self.is(1, '[') || (self.is(1, '!') && self.is(2, '[')) => {
                    self.attribute(&mut pending, &mut module);
                    continue;
                }
                // A visibility: `pub(crate)`, `pub(in crate::a)` name no item.
                Tok::Ident(ref w) if w == "pub" => {
                    self.pos += 1;
                    if self.is(0, '(') {
                        self.skip_group();
                    }
                    continue;
                }
                Tok::Ident(ref w) if w == "mod" && self.ident(1).is_some() => {
                    let name = self.ident(1).unwrap_or_default().to_owned();
                    self.pos += 2;
                    if self.is(0, ';') {
                        self.pos += 1;
                        module
                            .files
                            .push((name, pending.cfg_test, pending.path.take()));
                    } else if self.is(0, '{') {
                        if pending.cfg_test {
                            self.skip_group();
                        } else {
                            self.pos += 1;
                            let inner = self.module();
                            if !inner.test {
                                module.inline.push((name, inner));
                            }
                        }
                    }
                    pending = Pending::default();
                    continue;
                }
                _ if pending.cfg_test => {
                    self.skip_item();
                    pending = Pending::default();
                    continue;
                }
                // (`use<'a>` in a return type is precise capturing, not an import.)
                Tok::Ident(ref w) if w == "use" && !self.is(1, '<') => {
                    self.pos += 1;
                    if self.peek(0) == Some(&Tok::PathSep) {
                        // `use ::name`: another crate.
                        self.skip_item();
                    } else {
                        let line = self.line();
                        self.use_tree(Vec::new(), line, &mut module.uses);
                        self.skip_item();
                    }
                }
                Tok::Ident(ref w)
                    if (w == "crate" || w == "super")
                        && self.peek(1) == Some(&Tok::PathSep)
                        && !(self.pos > 0 && self.toks[self.pos - 1].tok == Tok::Punct('$')) =>
                {
                    let line = self.line();
                    let mut segs = vec![w.clone()];
                    self.pos += 1;
                    while self.peek(0) == Some(&Tok::PathSep) {
                        match self.ident(1) {
                            Some(next) => {
                                segs.push(next.to_owned());
                                self.pos += 2;
                            }
                            None => break,
                        }
                    }
                    module.paths.push(PathRef {
                        segs,
                        line,
                        binds: None,
                        glob: false,
                    });
                }
                Tok::Punct('{') => {
                    depth += 1;
                    self.pos += 1;
                }
                Tok::Punct('}') => {
                    self.pos += 1;
                    if depth == 0 {
                        return module;
                    }
                    depth -= 1;
                }
                _ => self.pos += 1,
            }
            pending = Pending::default();
        }
        module
    }

    /// One `use` tree below `prefix`, its leaves pushed to `out`.
    fn use_tree(&mut self, mut segs: Vec<String>, line: usize, out: &mut Vec<PathRef>) {
        loop {
            match self.peek(0).cloned() {
                Some(Tok::Ident(name)) => {
                    self.pos += 1;
                    if self.peek(0) == Some(&Tok::PathSep) {
                        self.pos += 1;
                        segs.push(name);
                        continue;
                    }
                    let mut binds = Some(name.clone());
                    if name == "self" {
                        binds = segs.last().cloned();
                    } else {
                        segs.push(name);
                    }
                    if self.ident(0) == Some("as") {
                        binds = self.ident(1).map(str::to_owned);
                        self.pos += 2;
                    }
                    if binds.as_deref() == Some("_") {
                        binds = None;
                    }
                    out.push(PathRef {
                        segs,
                        line,
                        binds,
                        glob: false,
                    });
                    return;
                }
                Some(Tok::Punct('*')) => {
                    self.pos += 1;
                    out.push(PathRef {
                        segs,
                        line,
                        binds: None,
                        glob: true,
                    });
                    return;
                }
                Some(Tok::Punct('{')) => {
                    self.pos += 1;
                    loop {
                        match self.peek(0) {
                            None => return,
                            Some(Tok::Punct('}')) => {
                                self.pos += 1;
                                return;
                            }
                            Some(Tok::Punct(',')) => self.pos += 1,
                            Some(_) => {
                                let before = self.pos;
                                let line = self.line();
                                self.use_tree(segs.clone(), line, out);
                                if self.pos == before {
                                    self.pos += 1;
                                }
                            }
                        }
                    }
                }
                _ => return,
            }
        }
    }
}

/// The items of one file.
fn parse(src: &str) -> ParsedModule {
    Parser {
        toks: lex(src),
        pos: 0,
    }
    .module()
}

// ----------------------------------------------------------------------------------------
// The graph

/// A module of the crate: where it is, what it contains and what it names.
#[derive(Debug)]
struct Module {
    path: Vec<String>,
    file: usize,
    children: HashMap<String, usize>,
    /// Test code (`#[cfg(test)]`, here or above): its references are not edges.
    test: bool,
    uses: Vec<PathRef>,
    paths: Vec<PathRef>,
}

/// One crate root's module tree, and the references between its files.
#[derive(Debug)]
pub(crate) struct CrateGraph {
    /// Files relative to `src`, in the order they were found.
    files: Vec<String>,
    modules: Vec<Module>,
    /// (from, to) -> the first reference making the edge: "file:line path".
    edges: BTreeMap<(usize, usize), String>,
}

/// Files that import each other in a circle.
#[derive(Debug)]
pub(crate) struct Cycle {
    /// Its files, sorted.
    pub(crate) files: Vec<String>,
    /// A shortest way round from the first file back to it.
    pub(crate) path: Vec<String>,
    /// Every reference between two of its files: "from:line names path (to)".
    pub(crate) references: Vec<String>,
}

impl CrateGraph {
    /// Loads the crate rooted at `root` (`lib.rs`, `main.rs`), reading files by their path
    /// relative to `src` with `read`, and finds the references between them.
    pub(crate) fn load(root: &str, read: &dyn Fn(&str) -> Option<String>) -> Self {
        let mut graph = CrateGraph {
            files: vec![root.to_owned()],
            modules: Vec::new(),
            edges: BTreeMap::new(),
        };
        let parsed = parse(&read(root).unwrap_or_default());
        let test = parsed.test;
        graph.add(Vec::new(), 0, dir_for_children(root), parsed, test, read);
        graph.link();
        graph
    }

    /// Adds the module at `path`, parsed from `file`, and its children; returns its index.
    fn add(
        &mut self,
        path: Vec<String>,
        file: usize,
        dir: String,
        parsed: ParsedModule,
        test: bool,
        read: &dyn Fn(&str) -> Option<String>,
    ) -> usize {
        let id = self.modules.len();
        self.modules.push(Module {
            path: path.clone(),
            file,
            children: HashMap::new(),
            test,
            uses: parsed.uses,
            paths: parsed.paths,
        });
        let join = |dir: &str, name: &str| {
            if dir.is_empty() {
                name.to_owned()
            } else {
                format!("{dir}/{name}")
            }
        };
        for (name, inner) in parsed.inline {
            let child_path = [path.as_slice(), std::slice::from_ref(&name)].concat();
            let inner_test = test || inner.test;
            let child = self.add(child_path, file, join(&dir, &name), inner, inner_test, read);
            self.modules[id].children.insert(name, child);
        }
        for (name, cfg_test, path_attr) in parsed.files {
            let candidates = match &path_attr {
                Some(given) => vec![join(parent_dir(&self.files[file]), given)],
                None => vec![
                    join(&dir, &format!("{name}.rs")),
                    join(&dir, &format!("{name}/mod.rs")),
                ],
            };
            let Some((rel, text)) = candidates
                .into_iter()
                .find_map(|rel| read(&rel).map(|text| (rel, text)))
            else {
                continue;
            };
            let parsed = parse(&text);
            let child_test = test || cfg_test || parsed.test;
            let child_file = self.files.len();
            self.files.push(rel.clone());
            let child_path = [path.as_slice(), std::slice::from_ref(&name)].concat();
            let child = self.add(
                child_path,
                child_file,
                dir_for_children(&rel),
                parsed,
                child_test,
                read,
            );
            self.modules[id].children.insert(name, child);
        }
        id
    }

    /// Resolves every reference of every module outside test code into an edge.
    fn link(&mut self) {
        let mut edges = BTreeMap::new();
        for module in &self.modules {
            if module.test {
                continue;
            }
            let named = module.uses.iter().chain(&module.paths);
            for reference in named.filter(|r| matches!(r.segs[0].as_str(), "crate" | "super")) {
                let Some(target) = self
                    .absolute(module, &reference.segs)
                    .and_then(|abs| self.resolve(&abs, 0))
                else {
                    continue;
                };
                if target != module.file {
                    let glob = if reference.glob { "::*" } else { "" };
                    edges.entry((module.file, target)).or_insert_with(|| {
                        format!(
                            "{}:{} names {}{glob} ({})",
                            self.files[module.file],
                            reference.line,
                            reference.segs.join("::"),
                            self.files[target]
                        )
                    });
                }
            }
        }
        self.edges = edges;
    }

    /// `segs` as written in `module`, as a path from the crate root (`None`: another crate).
    fn absolute(&self, module: &Module, segs: &[String]) -> Option<Vec<String>> {
        let mut base = module.path.clone();
        let mut rest = segs;
        match segs.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &segs[1..];
            }
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some("self") => rest = &segs[1..],
            Some(first) if module.children.contains_key(first) => {}
            _ => return None,
        }
        Some([base.as_slice(), rest].concat())
    }

    /// The file the item at `abs` (a path from the crate root) lives in: the innermost module
    /// it names, or, for an item that module imports, where the import leads.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<usize> {
        if depth > 16 {
            return None;
        }
        let mut module = 0;
        let mut i = 0;
        while let Some(&child) = abs
            .get(i)
            .and_then(|s| self.modules[module].children.get(s))
        {
            module = child;
            i += 1;
        }
        let here = &self.modules[module];
        let Some(name) = abs.get(i) else {
            return Some(here.file);
        };
        let imported = here
            .uses
            .iter()
            .find(|u| u.binds.as_deref() == Some(name.as_str()));
        match imported {
            Some(import) => {
                let target = self.absolute(here, &import.segs)?;
                if target.as_slice() == &abs[..=i] {
                    return Some(here.file);
                }
                self.resolve(&target, depth + 1)
            }
            None => Some(here.file),
        }
    }

    /// Every edge as (from, to) file names.
    #[cfg(test)]
    fn edge_names(&self) -> Vec<(String, String)> {
        self.edges
            .keys()
            .map(|&(a, b)| (self.files[a].clone(), self.files[b].clone()))
            .collect()
    }

    /// Every set of more than one file that import each other in a circle.
    pub(crate) fn cycles(&self) -> Vec<Cycle> {
        let n = self.files.len();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
        for &(a, b) in self.edges.keys() {
            next[a].push(b);
        }
        let mut cycles: Vec<Cycle> = strongly_connected(&next)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| {
                let mut members: Vec<usize> = component;
                members.sort_by(|&a, &b| self.files[a].cmp(&self.files[b]));
                let inside: BTreeSet<usize> = members.iter().copied().collect();
                let path = shortest_cycle(&next, members[0], &inside)
                    .into_iter()
                    .map(|f| self.files[f].clone())
                    .collect();
                let mut references: Vec<String> = self
                    .edges
                    .iter()
                    .filter(|((a, b), _)| inside.contains(a) && inside.contains(b))
                    .map(|(_, why)| why.clone())
                    .collect();
                references.sort();
                Cycle {
                    files: members.iter().map(|&f| self.files[f].clone()).collect(),
                    path,
                    references,
                }
            })
            .collect();
        cycles.sort_by(|a, b| a.files.cmp(&b.files));
        cycles
    }
}

/// The directory a module file's `mod child;` files live in: beside `lib.rs`, `main.rs` and
/// `mod.rs`, and in `foo/` for `foo.rs`.
fn dir_for_children(rel: &str) -> String {
    let dir = parent_dir(rel);
    let file = rel.rsplit('/').next().unwrap_or(rel);
    match file {
        "lib.rs" | "main.rs" | "mod.rs" => dir.to_owned(),
        _ => rel.trim_end_matches(".rs").to_owned(),
    }
}

/// The directory part of a `/`-separated path ("" for none).
fn parent_dir(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Tarjan's strongly connected components of the graph given by successor lists.
fn strongly_connected(next: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        next: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.next[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(index) if s.on_stack[w] => s.low[v] = s.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let n = next.len();
    let mut state = State {
        next,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    state.out
}

/// A shortest path from `start` back to itself through `inside` (`start` at both ends).
fn shortest_cycle(next: &[Vec<usize>], start: usize, inside: &BTreeSet<usize>) -> Vec<usize> {
    let mut came_from: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in &next[v] {
            if !inside.contains(&w) {
                continue;
            }
            if w == start {
                let mut path = vec![start, v];
                let mut at = v;
                while at != start {
                    at = came_from[&at];
                    path.push(at);
                }
                path.reverse();
                return path;
            }
            if let std::collections::hash_map::Entry::Vacant(entry) = came_from.entry(w) {
                entry.insert(v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate made of `files` (path relative to `src`, source), rooted at `lib.rs`.
    fn graph(files: &[(&str, &str)]) -> CrateGraph {
        let files: HashMap<String, String> = files
            .iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
            .collect();
        CrateGraph::load("lib.rs", &|rel| files.get(rel).cloned())
    }

    /// The graph's edges as "from -> to", sorted.
    fn edges(g: &CrateGraph) -> Vec<String> {
        let mut out: Vec<String> = g
            .edge_names()
            .into_iter()
            .map(|(from, to)| format!("{from} -> {to}"))
            .collect();
        out.sort();
        out
    }

    /// Three files in a circle, through a re-export, a nested `use` tree and `super::`; a
    /// fourth beside them.
    const CYCLE: &[(&str, &str)] = &[
        (
            "lib.rs",
            "//! A crate.\nmod a;\nmod b;\nmod c;\nmod d;\n\
             pub use a::Alpha;\npub use b::{Beta, Gamma as G};\npub use other::Record;\n",
        ),
        ("a.rs", "use crate::{G, Record};\npub struct Alpha;\n"),
        (
            "b.rs",
            "pub struct Beta;\npub struct Gamma;\nfn f() { crate::c::go(); }\n",
        ),
        (
            "c.rs",
            "pub(crate) fn go() { let _ = super::Alpha; }\n\
             pub(in crate::c) fn h() { crate::d::x(); }\n",
        ),
        ("d.rs", "pub(crate) fn x() {}\n"),
    ];

    #[test]
    fn edges_follow_reexports_nested_trees_and_super() {
        let g = graph(CYCLE);
        assert_eq!(
            edges(&g),
            [
                "a.rs -> b.rs",
                "b.rs -> c.rs",
                "c.rs -> a.rs",
                "c.rs -> d.rs"
            ],
            "a re-export of another crate (`Record`) and a visibility are not edges"
        );
    }

    #[test]
    fn a_cycle_is_reported_with_its_files_and_references() {
        let cycles = graph(CYCLE).cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        let cycle = &cycles[0];
        assert_eq!(cycle.files, ["a.rs", "b.rs", "c.rs"]);
        assert_eq!(cycle.path, ["a.rs", "b.rs", "c.rs", "a.rs"]);
        assert_eq!(
            cycle.references,
            [
                "a.rs:1 names crate::G (b.rs)",
                "b.rs:3 names crate::c::go (c.rs)",
                "c.rs:1 names super::Alpha (a.rs)",
            ]
        );
    }

    /// Layers, with what must not count as an edge: test code reaching up, comments,
    /// strings, macros' `$crate`, a parent re-exporting its children, self-references.
    const LAYERS: &[(&str, &str)] = &[
        (
            "lib.rs",
            "mod low;\nmod high;\nmod kit;\npub use low::Low;\npub use kit::Harness;\n",
        ),
        (
            "low.rs",
            r####"//! Uses nothing: crate::high::High in a comment.
/* crate::high::High /* nested */ crate::high::High */
pub struct Low;
const S: &str = "crate::high::High";
const R: &str = r#"crate::high::High "quoted""#;
const C: char = '"';
fn f<'a>(x: &'a str) -> &'a str { let _ = crate::low::Low; x }
macro_rules! m { () => { $crate::high::High } }
#[cfg(test)]
fn helper() { crate::high::High; }
#[cfg(test)]
use crate::high::High;
#[cfg(test)]
mod tests {
    use crate::high::High;
    use super::*;
}
"####,
        ),
        (
            "high.rs",
            "use crate::Low;\nuse crate::low::*;\npub struct High;\n#[cfg(test)]\nmod tests;\n",
        ),
        (
            "high/tests.rs",
            "use crate::high::High;\nuse crate::kit::Harness;\n",
        ),
        (
            "kit/mod.rs",
            "mod take;\nmod time;\npub use take::take_free_row;\npub use time::*;\n\
             pub struct Harness;\nfn helper() {}\n",
        ),
        (
            "kit/take.rs",
            "use super::{helper, Harness};\nuse crate::Low;\npub fn take_free_row() {}\n",
        ),
        ("kit/time.rs", "use super::super::kit::Harness;\n"),
    ];

    #[test]
    fn layers_have_no_cycle_and_tests_comments_and_children_are_no_edges() {
        let g = graph(LAYERS);
        assert_eq!(
            edges(&g),
            [
                "high.rs -> low.rs",
                "kit/take.rs -> kit/mod.rs",
                "kit/take.rs -> low.rs",
                "kit/time.rs -> kit/mod.rs",
            ]
        );
        assert!(g.cycles().is_empty(), "{:?}", g.cycles());
        assert_eq!(
            g.files,
            [
                "lib.rs",
                "low.rs",
                "high.rs",
                "high/tests.rs",
                "kit/mod.rs",
                "kit/take.rs",
                "kit/time.rs"
            ],
            "`foo.rs` children live in `foo/`, `mod.rs` children beside it"
        );
    }

    #[test]
    fn a_child_reaching_a_sibling_through_its_parents_reexport_is_an_edge_to_the_sibling() {
        let g = graph(&[
            ("lib.rs", "mod m;\n"),
            ("m/mod.rs", "mod a;\nmod b;\npub use a::A;\npub use b::B;\n"),
            ("m/a.rs", "pub struct A;\nfn f() { super::B; }\n"),
            ("m/b.rs", "pub struct B;\nuse super::A;\n"),
        ]);
        assert_eq!(edges(&g), ["m/a.rs -> m/b.rs", "m/b.rs -> m/a.rs"]);
        let cycles = g.cycles();
        assert_eq!(cycles.len(), 1);
        assert_eq!(cycles[0].files, ["m/a.rs", "m/b.rs"]);
    }

    #[test]
    fn inline_modules_resolve_to_their_file() {
        let g = graph(&[
            (
                "lib.rs",
                "mod a;\nmod b;\npub mod api { pub use crate::b::B; }\n",
            ),
            (
                "a.rs",
                "use crate::api::B;\nmod inner { use super::super::b::B; }\n",
            ),
            ("b.rs", "pub struct B;\n"),
        ]);
        assert_eq!(edges(&g), ["a.rs -> b.rs", "lib.rs -> b.rs"]);
    }

    #[test]
    fn the_lexer_skips_literals_comments_and_lifetimes() {
        let words = |src: &str| -> Vec<String> {
            lex(src)
                .into_iter()
                .filter_map(|t| match t.tok {
                    Tok::Ident(w) => Some(w),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            words("a /* b /* c */ d */ e // f\n'g' '\\'' 'h b'i' b\"j\" br#\"k\"# r#l 'static m"),
            ["a", "e", "l", "m"]
        );
        let lines: Vec<usize> = lex("x\n\"a\nb\"\ny").iter().map(|t| t.line).collect();
        assert_eq!(lines, [1, 2, 4], "lines are counted through literals");
    }

    #[test]
    fn tests_dirs_and_tests_files_are_exempt_from_the_line_limit() {
        assert!(is_exempt("tests.rs"));
        assert!(is_exempt("coordinator/tests.rs"));
        assert!(is_exempt("tests/big.rs"));
        assert!(is_exempt("a/tests/b/c.rs"));
        assert!(!is_exempt("lib.rs"));
        assert!(!is_exempt("testkit/mod.rs"));
        assert!(!is_exempt("my_tests.rs"));
    }
}
