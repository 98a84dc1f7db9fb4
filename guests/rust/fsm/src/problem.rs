//! A problem found in a loop file: where it is and what to do about it.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The file as the user named it (the loop, or one it imports).
    pub file: String,
    /// 1-based line; 0 when the problem has no single place (a missing field).
    pub line: u32,
    pub message: String,
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

/// Problems collected while reading one file.
#[derive(Debug, Default)]
pub struct Problems {
    pub file: String,
    pub list: Vec<Problem>,
}

impl Problems {
    pub fn new(file: &str) -> Problems {
        Problems {
            file: file.to_string(),
            list: Vec::new(),
        }
    }

    pub fn at(&mut self, line: u32, message: impl Into<String>) {
        self.list.push(Problem {
            file: self.file.clone(),
            line,
            message: message.into(),
        });
    }
}

/// All problems, one per line, in file and line order.
pub fn render(problems: &[Problem]) -> String {
    let mut sorted = problems.to_vec();
    sorted.sort_by(|a, b| (a.file.as_str(), a.line).cmp(&(b.file.as_str(), b.line)));
    sorted
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
