//! A problem found in a loop file: where it is and what to do about it.
//!
//! A loop can be put together from several files (a parent named by `from:`,
//! fragment libraries and state files named by `import:`). Every line number
//! the reader sees carries its file: the bits above [`LINE_BITS`] index the
//! load's file table, so a problem in a merged-in part names the file it was
//! written in. [`yaml::tag`](crate::yaml::tag) applies the index.

use std::fmt;

/// Bits of a tagged line that hold the line itself. A loop file is at most
/// 1 MiB, so it has fewer than 2^21 lines.
pub const LINE_BITS: u32 = 21;
const LINE_MASK: u32 = (1 << LINE_BITS) - 1;

/// The line a tagged line names, without its file.
pub fn line_of(tagged: u32) -> u32 {
    tagged & LINE_MASK
}

/// The index of the file a tagged line is in.
pub fn file_of(tagged: u32) -> usize {
    (tagged >> LINE_BITS) as usize
}

#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The file as the user named it (the loop, or one it imports).
    pub file: String,
    /// 1-based line; 0 when the problem has no single place (a missing field).
    pub line: u32,
    pub message: String,
}

impl Problem {
    /// A problem at a tagged line, its file looked up in `files`.
    pub fn at(files: &[String], tagged: u32, message: impl Into<String>) -> Problem {
        Problem {
            file: files
                .get(file_of(tagged))
                .or(files.first())
                .cloned()
                .unwrap_or_default(),
            line: line_of(tagged),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

/// Problems collected while reading a loop and the files it is built from.
#[derive(Debug, Default)]
pub struct Problems {
    /// The files of the load, by the index their tagged lines carry; the loop itself first.
    pub files: Vec<String>,
    pub list: Vec<Problem>,
    /// Things loopbox reads but does not act on, or acts on differently: the
    /// loop still runs. `validate` prints them.
    pub notes: Vec<Problem>,
}

impl Problems {
    pub fn new(file: &str) -> Problems {
        Problems {
            files: vec![file.to_string()],
            ..Default::default()
        }
    }

    /// Add a file to the table; its index tags the lines read from it.
    pub fn add_file(&mut self, file: &str) -> u32 {
        if let Some(i) = self.files.iter().position(|f| f == file) {
            return i as u32;
        }
        self.files.push(file.to_string());
        (self.files.len() - 1) as u32
    }

    /// The file a tagged line is in.
    pub fn file(&self, tagged: u32) -> &str {
        self.files
            .get(file_of(tagged))
            .or(self.files.first())
            .map(String::as_str)
            .unwrap_or("")
    }

    pub fn at(&mut self, tagged: u32, message: impl Into<String>) {
        let problem = Problem::at(&self.files, tagged, message);
        self.list.push(problem);
    }

    pub fn note(&mut self, tagged: u32, message: impl Into<String>) {
        let problem = Problem::at(&self.files, tagged, message);
        if !self.notes.contains(&problem) {
            self.notes.push(problem);
        }
    }
}

/// All problems, one per line, in file and line order.
pub fn render(problems: &[Problem]) -> String {
    let mut sorted = problems.to_vec();
    sorted.sort_by(|a, b| (a.file.as_str(), a.line).cmp(&(b.file.as_str(), b.line)));
    sorted.dedup();
    sorted
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
