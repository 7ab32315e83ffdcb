//! Mutual authentication on the cluster's shared token, without the token crossing the wire,
//! and the verb key a memnode hands to the clients it authenticated.
//!
//! # Handshake (see [`crate::proto`] for the frames)
//!
//! 1. The client sends a fresh random nonce `cn`.
//! 2. The memnode answers its own nonce `sn` and proves it holds the token:
//!    `HMAC-SHA256(token, "dmindex memnode" ‖ cn ‖ sn)`. A server that cannot (another program,
//!    another cluster's memnode) is refused by the client before it learns anything.
//! 3. The client proves it holds the token: `HMAC-SHA256(token, "dmindex client" ‖ sn ‖ cn)`.
//!    The memnode checks in constant time and refuses (and logs) a wrong proof.
//! 4. The memnode's welcome carries its verb key sealed with
//!    `HMAC-SHA256(token, "dmindex verb key" ‖ cn ‖ sn)`; the pool's remote key and the worker
//!    address come only in the welcome, so only authenticated clients get them.
//!
//! # Trust model
//!
//! Whoever holds the token is trusted with the whole pool. The token itself is never sent.
//! Memnode-executed verbs (TCP) carry the memnode's verb key — 128 random bits drawn when the
//! memnode starts — and the memnode executes only those whose key matches, so reaching the
//! memnode's UCX worker is not enough to read or write a byte. On one-sided transports (shared
//! memory, RDMA) the pool's remote key is the capability, as in RDMA itself; it is only ever sent
//! to authenticated clients. Verb keys and remote keys travel in the clear like RDMA's: an
//! attacker who can read the cluster's traffic can use them, so the cluster's network must be
//! private to it (as an RDMA fabric is); one who can only reach its ports cannot.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a nonce.
pub const NONCE: usize = 32;
/// Bytes of a proof.
pub const PROOF: usize = 32;
/// Bytes of a verb key.
pub const VERB_KEY: usize = 16;

/// A nonce, a verb key or an incarnation: fresh from the operating system's randomness.
pub fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the operating system's randomness");
    b
}

fn mac(token: &[u8], label: &[u8], a: &[u8], b: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(token).expect("HMAC takes any key length");
    m.update(label);
    m.update(a);
    m.update(b);
    m
}

/// What the memnode sends to prove it holds `token`.
pub fn server_proof(token: &[u8], cn: &[u8; NONCE], sn: &[u8; NONCE]) -> [u8; PROOF] {
    mac(token, b"dmindex memnode", cn, sn).finalize().into_bytes().into()
}

/// What the client sends to prove it holds `token`.
pub fn client_proof(token: &[u8], cn: &[u8; NONCE], sn: &[u8; NONCE]) -> [u8; PROOF] {
    mac(token, b"dmindex client", sn, cn).finalize().into_bytes().into()
}

/// Whether `proof` is the memnode's proof for this handshake (constant time).
pub fn server_proof_ok(token: &[u8], cn: &[u8; NONCE], sn: &[u8; NONCE], proof: &[u8]) -> bool {
    mac(token, b"dmindex memnode", cn, sn).verify_slice(proof).is_ok()
}

/// Whether `proof` is the client's proof for this handshake (constant time).
pub fn client_proof_ok(token: &[u8], cn: &[u8; NONCE], sn: &[u8; NONCE], proof: &[u8]) -> bool {
    mac(token, b"dmindex client", sn, cn).verify_slice(proof).is_ok()
}

/// The verb key sealed for (or unsealed from) this handshake: the same operation both ways.
pub fn seal(
    token: &[u8],
    cn: &[u8; NONCE],
    sn: &[u8; NONCE],
    key: [u8; VERB_KEY],
) -> [u8; VERB_KEY] {
    let pad = mac(token, b"dmindex verb key", cn, sn).finalize().into_bytes();
    let mut out = key;
    for (o, p) in out.iter_mut().zip(pad) {
        *o ^= p;
    }
    out
}

/// Whether two verb keys are equal, in time independent of where they differ.
pub fn keys_equal(a: &[u8; VERB_KEY], b: &[u8; VERB_KEY]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_token_nonces_and_role() {
        let (cn, sn) = ([1u8; NONCE], [2u8; NONCE]);
        let s = server_proof(b"tok", &cn, &sn);
        let c = client_proof(b"tok", &cn, &sn);
        assert!(server_proof_ok(b"tok", &cn, &sn, &s));
        assert!(client_proof_ok(b"tok", &cn, &sn, &c));
        assert_ne!(s, c, "a server's proof is no client's");
        assert!(!client_proof_ok(b"tok", &cn, &sn, &s));
        assert!(!server_proof_ok(b"tox", &cn, &sn, &s), "another token");
        assert!(!server_proof_ok(b"tok", &sn, &cn, &s), "swapped nonces");
        assert!(!server_proof_ok(b"tok", &cn, &sn, &s[..31]), "a short proof");
        // Pinned against another HMAC-SHA256 (Python's hmac), so other implementations of
        // the handshake interoperate.
        assert_eq!(s[..8], [0xd5, 0x8f, 0xdc, 0xf2, 0xa1, 0xfc, 0x0e, 0xba]);
    }

    #[test]
    fn sealing_is_its_own_inverse_and_hides_the_key() {
        let (cn, sn, key) = ([3u8; NONCE], [4u8; NONCE], [9u8; VERB_KEY]);
        let sealed = seal(b"tok", &cn, &sn, key);
        assert_ne!(sealed, key);
        assert_eq!(seal(b"tok", &cn, &sn, sealed), key);
        assert_ne!(seal(b"tox", &cn, &sn, sealed), key);
        assert!(keys_equal(&key, &key) && !keys_equal(&key, &sealed));
        assert_ne!(random::<NONCE>(), random::<NONCE>());
    }
}
