//! The top-level custom sections of a component binary: finding, stripping
//! and appending the two loopbox writes (`loopbox-needs`, `loopbox-signature`).
//!
//! Only the component's own top level is walked: a custom section inside a
//! nested core module belongs to that module and is never read as loopbox's.

use anyhow::{Result, bail};

/// The grants a policy asks for (JSON, see [`super::needs`]).
pub const NEEDS: &str = "loopbox-needs";
/// The signature over everything before it (JSON, see [`super::sign`]).
pub const SIGNATURE: &str = "loopbox-signature";

/// One top-level section: its byte range in the binary and, for a custom
/// section, its name and payload range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub start: usize,
    pub end: usize,
    pub custom: Option<(String, std::ops::Range<usize>)>,
}

/// The top-level sections of a component (after its 8-byte preamble).
pub fn walk(bytes: &[u8]) -> Result<Vec<Section>> {
    if !wasmparser::Parser::is_component(bytes) {
        bail!("it is not a WebAssembly component");
    }
    let mut out = Vec::new();
    let mut at = 8;
    while at < bytes.len() {
        let start = at;
        let id = bytes[at];
        at += 1;
        let size = leb(bytes, &mut at)? as usize;
        let end = at
            .checked_add(size)
            .filter(|e| *e <= bytes.len())
            .ok_or_else(|| anyhow::anyhow!("a section at byte {start} runs past the end"))?;
        let custom = if id == 0 {
            let mut p = at;
            let len = leb(bytes, &mut p)? as usize;
            let name_end = p.checked_add(len).filter(|e| *e <= end).ok_or_else(|| {
                anyhow::anyhow!("a custom section name at byte {p} runs past its section")
            })?;
            let name = std::str::from_utf8(&bytes[p..name_end])
                .map_err(|_| anyhow::anyhow!("a custom section name at byte {p} is not UTF-8"))?;
            Some((name.to_string(), name_end..end))
        } else {
            None
        };
        out.push(Section { start, end, custom });
        at = end;
    }
    Ok(out)
}

/// The payload of the one top-level custom section called `name`, if any.
/// Two of them is an error: which one counts would be ambiguous.
pub fn find<'a>(bytes: &'a [u8], name: &str) -> Result<Option<(&'a [u8], Section)>> {
    let mut found = None;
    for s in walk(bytes)? {
        if let Some((n, range)) = &s.custom
            && n == name
        {
            if found.is_some() {
                bail!("it has more than one `{name}` section");
            }
            found = Some((&bytes[range.clone()], s.clone()));
        }
    }
    Ok(found)
}

/// `bytes` without its top-level custom sections called any of `names`.
pub fn strip(bytes: &[u8], names: &[&str]) -> Result<Vec<u8>> {
    let mut out = bytes[..8.min(bytes.len())].to_vec();
    for s in walk(bytes)? {
        let drop = s
            .custom
            .as_ref()
            .is_some_and(|(n, _)| names.contains(&n.as_str()));
        if !drop {
            out.extend_from_slice(&bytes[s.start..s.end]);
        }
    }
    Ok(out)
}

/// `bytes` with a custom section `name` holding `payload` appended at the end.
pub fn append(mut bytes: Vec<u8>, name: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(name.len() + payload.len() + 5);
    put_leb(&mut body, name.len() as u64);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    bytes.push(0);
    put_leb(&mut bytes, body.len() as u64);
    bytes.extend_from_slice(&body);
    bytes
}

fn leb(bytes: &[u8], at: &mut usize) -> Result<u32> {
    let mut value: u64 = 0;
    for shift in (0..35).step_by(7) {
        let Some(&b) = bytes.get(*at) else {
            bail!("the binary ends inside a section header");
        };
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return u32::try_from(value).map_err(|_| anyhow::anyhow!("a section size overflows"));
        }
    }
    bail!("a section size is not a valid LEB128 number")
}

fn put_leb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component() -> Vec<u8> {
        wat::parse_str("(component (core module (@custom \"loopbox-needs\" \"inner\")))").unwrap()
    }

    #[test]
    fn appended_sections_are_found_and_stripped_and_inner_ones_ignored() {
        let c = component();
        assert!(
            find(&c, NEEDS).unwrap().is_none(),
            "a core module's section is not the component's"
        );
        let with = append(c.clone(), NEEDS, b"{\"exec\":[]}");
        wasmparser::Validator::new().validate_all(&with).unwrap();
        assert_eq!(find(&with, NEEDS).unwrap().unwrap().0, b"{\"exec\":[]}");
        assert_eq!(strip(&with, &[NEEDS]).unwrap(), c);
        let twice = append(with, NEEDS, b"{}");
        assert!(
            find(&twice, NEEDS)
                .unwrap_err()
                .to_string()
                .contains("more than one")
        );
    }

    #[test]
    fn truncated_or_core_binaries_are_refused() {
        let c = append(component(), NEEDS, &[b'x'; 300]);
        assert!(
            walk(&c[..c.len() - 1])
                .unwrap_err()
                .to_string()
                .contains("past the end")
        );
        assert!(walk(&wat::parse_str("(module)").unwrap()).is_err());
    }
}
