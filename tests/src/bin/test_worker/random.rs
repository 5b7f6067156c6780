//! Random identifiers shaped like Python's `uuid.uuid4()`.

/// `uuid.uuid4().hex`: 32 lowercase hex digits (receipt instance ids).
pub(crate) fn uuid4_hex() -> String {
    uuid4().replace('-', "")
}

/// `str(uuid.uuid4())`: canonical hyphenated form (lease ids).
pub(crate) fn uuid4() -> String {
    python_compat::uuid::uuid4().expect("the kernel CSPRNG is readable")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::is_canonical_uuid;

    #[test]
    fn shapes() {
        let hex = uuid4_hex();
        assert_eq!(hex.len(), 32);
        assert_eq!(&hex[12..13], "4");
        let canonical = uuid4();
        assert!(is_canonical_uuid(&canonical));
        assert_ne!(uuid4(), canonical);
    }
}
