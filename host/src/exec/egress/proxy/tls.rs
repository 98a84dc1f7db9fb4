//! The server name of a TLS client hello, read from the first record of a
//! tunnel (no crate reads a hello without taking over the connection).

/// `Ok(Some(name))`, `Ok(None)` when the hello has no server name (or is not
/// a hello at all), `Err(())` when more bytes are needed.
pub fn server_name(b: &[u8]) -> Result<Option<String>, ()> {
    let mut r = Reader(b);
    // Record: type 0x16, version, length; only what the first record holds is read.
    let header = r.take(5).ok_or(())?;
    let len = u16::from_be_bytes([header[3], header[4]]) as usize;
    let Some(body) = r.take(len) else {
        // A hello longer than what was read: ask for more, unless it cannot fit in 16 KiB.
        return if len > (16 << 10) - 5 {
            Ok(None)
        } else {
            Err(())
        };
    };
    Ok(hello(body))
}

fn hello(b: &[u8]) -> Option<String> {
    let mut r = Reader(b);
    if r.u8()? != 1 {
        return None;
    }
    r.take(3)?; // handshake length
    r.take(2 + 32)?; // version, random
    let sid = r.u8()? as usize;
    r.take(sid)?;
    let suites = r.u16()? as usize;
    r.take(suites)?;
    let comp = r.u8()? as usize;
    r.take(comp)?;
    let ext_len = r.u16()? as usize;
    let mut exts = Reader(r.take(ext_len)?);
    while let (Some(kind), Some(len)) = (exts.u16(), exts.u16()) {
        let data = exts.take(len as usize)?;
        if kind != 0 {
            continue;
        }
        let mut sni = Reader(data);
        let list = sni.u16()? as usize;
        let mut list = Reader(sni.take(list)?);
        while let Some(name_type) = list.u8() {
            let n = list.u16()? as usize;
            let name = list.take(n)?;
            if name_type == 0 {
                return Some(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    None
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal client hello naming `name`.
    pub fn hello_for(name: &str) -> Vec<u8> {
        let n = name.as_bytes();
        let mut sni = Vec::new();
        sni.extend(((n.len() + 3) as u16).to_be_bytes());
        sni.push(0);
        sni.extend((n.len() as u16).to_be_bytes());
        sni.extend(n);
        let mut ext = vec![0, 0];
        ext.extend((sni.len() as u16).to_be_bytes());
        ext.extend(sni);
        let mut body = vec![3, 3];
        body.extend([0u8; 32]);
        body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(ext);
        let mut hs = vec![1];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn the_server_name_is_read_and_a_short_hello_asks_for_more() {
        let h = hello_for("api.example.com");
        assert_eq!(server_name(&h), Ok(Some("api.example.com".into())));
        assert_eq!(server_name(&h[..20]), Err(()));
        assert_eq!(server_name(&[0x16, 3, 1, 0, 1, 9]), Ok(None));
    }
}
