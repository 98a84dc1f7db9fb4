//! The server name of a TLS client hello, read from the first records of a
//! tunnel (no crate reads a hello without taking over the connection). A
//! hello split over several records is put together first: reading only the
//! first record let a client that split its hello pass any server name.

/// What the first bytes of a tunnel say, as far as they go.
#[derive(Debug, PartialEq)]
pub enum Hello {
    /// A whole client hello naming this server.
    Name(String),
    /// A whole client hello without a server name.
    NoName,
    /// Not all of the hello yet.
    More,
    /// A hello that cannot be read, and why: the tunnel is refused.
    Unreadable(&'static str),
}

/// The largest client hello read (real ones are a few KiB, post-quantum
/// key shares included).
const MAX_HELLO: usize = 12 << 10;

/// Read the client hello at the start of `b` (which starts with a handshake record).
pub fn read(b: &[u8]) -> Hello {
    let mut r = Reader(b);
    let mut hs = Vec::new();
    loop {
        // The handshake message so far: its type and length, once known.
        if hs.len() >= 4 {
            if hs[0] != 1 {
                return Hello::Unreadable("its first handshake message is not a client hello");
            }
            let len = u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize;
            if len > MAX_HELLO {
                return Hello::Unreadable("its client hello is larger than 12 KiB");
            }
            if hs.len() >= 4 + len {
                return match hello(&hs[4..4 + len]) {
                    Some(Some(name)) => Hello::Name(name),
                    Some(None) => Hello::NoName,
                    None => Hello::Unreadable("its client hello is malformed"),
                };
            }
        }
        let Some(header) = r.take(5) else {
            return Hello::More;
        };
        if header[0] != 0x16 {
            return Hello::Unreadable(
                "a record other than a handshake comes before its hello ends",
            );
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        if len == 0 {
            return Hello::Unreadable("an empty handshake record");
        }
        let Some(body) = r.take(len) else {
            return Hello::More;
        };
        hs.extend_from_slice(body);
    }
}

/// The server name of a whole client hello's body: `None` when it is malformed.
fn hello(b: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(b);
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
                return Some(Some(String::from_utf8_lossy(name).into_owned()));
            }
        }
    }
    Some(None)
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
        assert_eq!(read(&h), Hello::Name("api.example.com".into()));
        assert_eq!(read(&h[..20]), Hello::More);
        assert_eq!(read(&h[..3]), Hello::More);
        assert_eq!(read(&[0x16, 3, 1, 0, 1, 9]), Hello::More);
        assert!(matches!(
            read(&[0x16, 3, 1, 0, 4, 9, 0, 0, 1]),
            Hello::Unreadable(_)
        ));
    }

    /// The same hello cut into records of 1, 7 and 100 bytes: the name is
    /// still read (before, only the first record was, and a hello split
    /// after its first bytes passed any name).
    #[test]
    fn a_hello_split_over_records_is_read_whole() {
        let h = hello_for("evil.example");
        let body = &h[5..];
        for size in [1, 7, 100] {
            let mut split = Vec::new();
            for chunk in body.chunks(size) {
                split.extend([0x16, 3, 1]);
                split.extend((chunk.len() as u16).to_be_bytes());
                split.extend(chunk);
            }
            assert_eq!(read(&split), Hello::Name("evil.example".into()), "{size}");
            assert_eq!(read(&split[..split.len() - 1]), Hello::More, "{size}");
        }
    }

    #[test]
    fn what_cannot_be_read_is_said() {
        let h = hello_for("a.example");
        // An alert record in the middle of the hello.
        let mut odd = h[..5 + 10].to_vec();
        odd[3..5].copy_from_slice(&10u16.to_be_bytes());
        odd.extend([0x15, 3, 1, 0, 2, 2, 40]);
        assert!(matches!(read(&odd), Hello::Unreadable(w) if w.contains("other than a handshake")));
        // A hello announcing 16 MiB.
        let huge = [0x16, 3, 1, 0, 4, 1, 0xff, 0, 0];
        assert!(matches!(read(&huge), Hello::Unreadable(w) if w.contains("larger")));
        // A server hello, not a client's.
        let mut server = h.clone();
        server[5] = 2;
        assert!(matches!(read(&server), Hello::Unreadable(_)));
        // A hello without a server name.
        let mut bare = vec![3, 3];
        bare.extend([0u8; 32]);
        bare.extend([0, 0, 2, 0x13, 0x01, 1, 0, 0, 0]);
        let mut hs = vec![1];
        hs.extend(&(bare.len() as u32).to_be_bytes()[1..]);
        hs.extend(bare);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        assert_eq!(read(&rec), Hello::NoName);
    }
}
