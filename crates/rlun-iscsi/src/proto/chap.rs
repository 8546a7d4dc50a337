//! CHAP authentication of the initiator, one-way or mutual (RFC 1994 §4,
//! RFC 7143 §12.1.3, security considerations in §9.2.1), with MD5 only
//! (`CHAP_A=5`).
//!
//! The security-stage exchange this module computes, as key sets:
//!
//! ```text
//! I->T  AuthMethod=CHAP                       (auth_method_offer)
//! T->I  AuthMethod=CHAP                       (check_auth_method_answer)
//! I->T  CHAP_A=5                              (ChapInitiator::algorithm_offer)
//! T->I  CHAP_A=5 CHAP_I=<id> CHAP_C=<challenge>
//! I->T  CHAP_N=<user> CHAP_R=<MD5(id||secret||challenge)>
//!       [+ CHAP_I=<our id> CHAP_C=<our challenge> when mutual]
//!                                             (ChapInitiator::handle_challenge)
//! T->I  [CHAP_N=<target user> CHAP_R=<response>]  (ChapInitiator::verify_target)
//! ```
//!
//! Rules enforced here:
//! - Only MD5 is offered and accepted; any other `CHAP_A` answer fails.
//! - The target's challenge must decode (hex `0x…` or base64 `0b…`) to
//!   [`MIN_CHALLENGE_LEN`] to [`MAX_CHALLENGE_LEN`] bytes. RFC 7143 §12.1.3
//!   caps it at 1024 bytes; the 16-byte floor is our policy (the MD5 output
//!   size; LIO, tgtd and FreeBSD's ctld all send at least that).
//! - Our mutual challenge is 16 fresh bytes from the OS (drawn by the caller
//!   — rlun's `entropy::chap_nonce` — and given with
//!   [`ChapInitiator::with_nonce`]) and
//!   never equals the target's (RFC 7143 §9.2.1). The initiator and target
//!   secrets must differ (§9.2.1: a secret used to authenticate initiators
//!   must not be used to authenticate targets), which defeats reflecting our
//!   challenge back at us on another connection; a target that returns our
//!   own response as its own is refused as well.
//! - Secrets are only read through [`Secret::expose`] to compute a hash and
//!   never appear in errors or logs.

use md5::{Digest, Md5};
use thiserror::Error;

use super::text::{decode_binary, encode_hex, parse_number, TextError, MAX_LARGE_BINARY_LEN};
use crate::secret::Secret;

/// `CHAP_A` value for MD5 (RFC 1994, IANA PPP authentication algorithms).
pub const CHAP_A_MD5: &str = "5";
/// Length of an MD5 CHAP response.
pub const CHAP_MD5_LEN: usize = 16;
/// Shortest target challenge we accept, in bytes (our policy, see module doc).
pub const MIN_CHALLENGE_LEN: usize = 16;
/// Longest challenge, in bytes (RFC 7143 §12.1.3).
pub const MAX_CHALLENGE_LEN: usize = MAX_LARGE_BINARY_LEN;
/// Length of the challenge we send for mutual CHAP.
pub const OUR_CHALLENGE_LEN: usize = 16;

/// The CHAP response: MD5 over the identifier, the secret and the challenge,
/// concatenated (RFC 1994 §4.1).
pub fn chap_response(id: u8, secret: &[u8], challenge: &[u8]) -> [u8; CHAP_MD5_LEN] {
    let mut md5 = Md5::new();
    md5.update([id]);
    md5.update(secret);
    md5.update(challenge);
    md5.finalize().into()
}

/// True for keys of the security negotiation stage: `AuthMethod` and the
/// keys of the authentication methods of RFC 7143 §12 (`CHAP_*`, `SRP_*`,
/// `KRB_*`, `SPKM_*`). The login state machine routes these to CHAP and
/// everything else to the operational `Negotiator` (`proto::negotiate`).
pub fn is_security_key(name: &str) -> bool {
    name == "AuthMethod"
        || ["CHAP_", "SRP_", "KRB_", "SPKM_"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// The outcome of `AuthMethod` negotiation (RFC 7143 §12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    None,
    Chap,
}

/// Our `AuthMethod` offer: only `CHAP` when CHAP is configured (offering
/// `CHAP,None` would let a target skip authentication), else only `None`.
pub fn auth_method_offer(chap_configured: bool) -> (String, String) {
    let value = if chap_configured { "CHAP" } else { "None" };
    ("AuthMethod".to_owned(), value.to_owned())
}

/// Checks the target's `AuthMethod` answer against our offer.
pub fn check_auth_method_answer(
    value: &str,
    chap_configured: bool,
) -> Result<AuthMethod, ChapError> {
    match (value, chap_configured) {
        ("CHAP", true) => Ok(AuthMethod::Chap),
        ("None", false) => Ok(AuthMethod::None),
        _ => Err(ChapError::AuthMethodRefused {
            value: super::text::excerpt(value),
            offered: auth_method_offer(chap_configured).1,
        }),
    }
}

/// Errors of CHAP authentication. None of them contain a secret.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChapError {
    #[error("CHAP user name is empty")]
    EmptyUser,
    #[error("CHAP secret is empty")]
    EmptySecret,
    #[error(
        "the target CHAP secret equals the initiator CHAP secret; \
         RFC 7143 §9.2.1 requires different secrets for the two directions"
    )]
    SameSecretBothWays,
    #[error("target answered AuthMethod={value}, but we offered AuthMethod={offered}")]
    AuthMethodRefused { value: String, offered: String },
    #[error("target's CHAP challenge has no {key}")]
    MissingKey { key: &'static str },
    #[error("target chose CHAP_A={value}; only 5 (MD5) is supported")]
    UnsupportedAlgorithm { value: String },
    #[error("target sent CHAP_I={value}; it must be a number from 0 to 255")]
    BadIdentifier { value: String },
    #[error("target sent an invalid {key}")]
    BadValue {
        key: &'static str,
        #[source]
        source: TextError,
    },
    #[error(
        "target's CHAP challenge is {len} bytes long; \
         {MIN_CHALLENGE_LEN} to {MAX_CHALLENGE_LEN} bytes are accepted"
    )]
    BadChallengeLength { len: usize },
    #[error("mutual CHAP authentication of the target failed: {reason}")]
    MutualAuthFailed { reason: &'static str },
    #[error("CHAP step out of order: {0}")]
    OutOfOrder(&'static str),
    #[error("no random bytes for our CHAP challenge: {0}")]
    Random(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    AwaitingChallenge,
    /// Mutual CHAP: we sent our challenge and wait for the target's answer.
    AwaitingTarget {
        expected: [u8; CHAP_MD5_LEN],
        our_response: [u8; CHAP_MD5_LEN],
    },
    Done,
}

/// The initiator side of one CHAP exchange (one connection's login).
#[derive(Debug, Clone)]
pub struct ChapInitiator {
    user: String,
    secret: Secret,
    mutual: Option<(String, Secret)>,
    nonce: Option<ChapNonce>,
    state: State,
}

/// Our side's random identifier and challenge for mutual CHAP (RFC 1994
/// §4.1: the challenge must be fresh and unpredictable). Drawn by the caller
/// from the OS, so the protocol core stays free of I/O and testable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChapNonce {
    pub id: u8,
    pub challenge: [u8; OUR_CHALLENGE_LEN],
}

impl ChapInitiator {
    /// `user`/`secret` authenticate us to the target; `mutual` is the
    /// target's expected name and secret when the target must prove itself
    /// too. Refuses empty names or secrets and a mutual secret equal to ours.
    pub fn new(
        user: impl Into<String>,
        secret: Secret,
        mutual: Option<(String, Secret)>,
    ) -> Result<Self, ChapError> {
        let user = user.into();
        if user.is_empty() {
            return Err(ChapError::EmptyUser);
        }
        if secret.is_empty() {
            return Err(ChapError::EmptySecret);
        }
        if let Some((target_user, target_secret)) = &mutual {
            if target_user.is_empty() {
                return Err(ChapError::EmptyUser);
            }
            if target_secret.is_empty() {
                return Err(ChapError::EmptySecret);
            }
            if target_secret.expose() == secret.expose() {
                return Err(ChapError::SameSecretBothWays);
            }
        }
        Ok(ChapInitiator {
            user,
            secret,
            mutual,
            nonce: None,
            state: State::AwaitingChallenge,
        })
    }

    /// True when the target must authenticate itself too.
    pub fn is_mutual(&self) -> bool {
        self.mutual.is_some()
    }

    /// True once the exchange is complete (after the response for one-way
    /// CHAP, after [`verify_target`](Self::verify_target) for mutual CHAP).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The keys of our first CHAP request: `CHAP_A=5`.
    pub fn algorithm_offer(&self) -> Vec<(String, String)> {
        vec![("CHAP_A".to_owned(), CHAP_A_MD5.to_owned())]
    }

    /// Answers the target's `CHAP_A`, `CHAP_I` and `CHAP_C` with `CHAP_N` and
    /// `CHAP_R`, plus our own `CHAP_I` and `CHAP_C` (the [`ChapNonce`] given
    /// with [`with_nonce`](Self::with_nonce)) for mutual CHAP.
    pub fn handle_challenge(
        &mut self,
        keys: &[(String, String)],
    ) -> Result<Vec<(String, String)>, ChapError> {
        let nonce = match (self.is_mutual(), self.nonce) {
            (true, None) => {
                return Err(ChapError::Random(
                    "no fresh challenge was given for mutual CHAP".into(),
                ))
            }
            (_, Some(n)) => n,
            (false, None) => ChapNonce {
                id: 0,
                challenge: [0; OUR_CHALLENGE_LEN],
            },
        };
        self.respond(keys, nonce.id, nonce.challenge)
    }

    /// Our identifier and challenge for mutual CHAP: fresh random bytes the
    /// caller draws (this module reads no randomness itself).
    pub fn with_nonce(mut self, nonce: ChapNonce) -> Self {
        self.nonce = Some(nonce);
        self
    }

    /// [`handle_challenge`](Self::handle_challenge) with our mutual
    /// identifier and challenge given (deterministic, for tests).
    fn respond(
        &mut self,
        keys: &[(String, String)],
        our_id: u8,
        mut our_challenge: [u8; OUR_CHALLENGE_LEN],
    ) -> Result<Vec<(String, String)>, ChapError> {
        if self.state != State::AwaitingChallenge {
            return Err(ChapError::OutOfOrder("a second CHAP challenge"));
        }
        let algorithm = find(keys, "CHAP_A")?;
        if algorithm != CHAP_A_MD5 {
            return Err(ChapError::UnsupportedAlgorithm {
                value: super::text::excerpt(algorithm),
            });
        }
        let id_value = find(keys, "CHAP_I")?;
        let id = parse_number(id_value)
            .ok()
            .and_then(|n| u8::try_from(n).ok())
            .ok_or_else(|| ChapError::BadIdentifier {
                value: super::text::excerpt(id_value),
            })?;
        let challenge =
            decode_binary(find(keys, "CHAP_C")?, MAX_CHALLENGE_LEN).map_err(|e| match e {
                TextError::BinaryTooLong { len, .. } => ChapError::BadChallengeLength { len },
                source => ChapError::BadValue {
                    key: "CHAP_C",
                    source,
                },
            })?;
        if challenge.len() < MIN_CHALLENGE_LEN {
            return Err(ChapError::BadChallengeLength {
                len: challenge.len(),
            });
        }

        let response = chap_response(id, self.secret.expose().as_bytes(), &challenge);
        let mut out = vec![
            ("CHAP_N".to_owned(), self.user.clone()),
            ("CHAP_R".to_owned(), encode_hex(&response)),
        ];
        self.state = match &self.mutual {
            None => State::Done,
            Some((_, target_secret)) => {
                // Never send the target its own challenge back (RFC 7143
                // §9.2.1). With 16 random bytes this only triggers if the
                // target guessed them; flipping a bit makes them differ.
                if our_challenge[..] == challenge[..] {
                    our_challenge[0] ^= 1;
                }
                out.push(("CHAP_I".to_owned(), our_id.to_string()));
                out.push(("CHAP_C".to_owned(), encode_hex(&our_challenge)));
                State::AwaitingTarget {
                    expected: chap_response(
                        our_id,
                        target_secret.expose().as_bytes(),
                        &our_challenge,
                    ),
                    our_response: response,
                }
            }
        };
        Ok(out)
    }

    /// Checks the target's `CHAP_N` and `CHAP_R` against our mutual
    /// challenge. Without mutual CHAP there is nothing to check and this
    /// returns `Ok(())`.
    pub fn verify_target(&mut self, keys: &[(String, String)]) -> Result<(), ChapError> {
        let (expected, our_response) = match (&self.mutual, &self.state) {
            (None, _) => return Ok(()),
            (
                Some(_),
                State::AwaitingTarget {
                    expected,
                    our_response,
                },
            ) => (*expected, *our_response),
            (Some(_), State::AwaitingChallenge) => {
                return Err(ChapError::OutOfOrder(
                    "target response before its challenge",
                ))
            }
            (Some(_), State::Done) => return Err(ChapError::OutOfOrder("target verified twice")),
        };
        let failed = |reason| ChapError::MutualAuthFailed { reason };
        let target_user = self.mutual.as_ref().map(|(u, _)| u.as_str());
        let name = find(keys, "CHAP_N").map_err(|_| failed("target sent no CHAP_N"))?;
        let response = find(keys, "CHAP_R").map_err(|_| failed("target sent no CHAP_R"))?;
        if Some(name) != target_user {
            return Err(failed("target CHAP_N is not the configured target user"));
        }
        let response =
            decode_binary(response, CHAP_MD5_LEN).map_err(|source| ChapError::BadValue {
                key: "CHAP_R",
                source,
            })?;
        if response.len() != CHAP_MD5_LEN {
            return Err(failed("target CHAP_R is not 16 bytes long"));
        }
        if constant_time_eq(&response, &our_response) {
            return Err(failed("target reflected our own CHAP response"));
        }
        if !constant_time_eq(&response, &expected) {
            return Err(failed(
                "target CHAP_R is wrong (the target does not know the secret)",
            ));
        }
        self.state = State::Done;
        Ok(())
    }
}

/// The value of `name` in `keys` (first occurrence).
fn find<'a>(keys: &'a [(String, String)], name: &'static str) -> Result<&'a str, ChapError> {
    keys.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .ok_or(ChapError::MissingKey { key: name })
}

/// Compares without an early exit, so timing does not reveal how many
/// leading bytes of a forged response were right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn hex(s: &str) -> Vec<u8> {
        decode_binary(&format!("0x{s}"), 64).unwrap()
    }

    /// 0x000102…0f, 16 bytes.
    const CHALLENGE_00_0F: &str = "0x000102030405060708090a0b0c0d0e0f";

    fn one_way() -> ChapInitiator {
        ChapInitiator::new("init-user", Secret::new("initiator-secret"), None).unwrap()
    }

    fn mutual() -> ChapInitiator {
        ChapInitiator::new(
            "init-user",
            Secret::new("initiator-secret"),
            Some(("target-user".into(), Secret::new("target-secret"))),
        )
        .unwrap()
        .with_nonce(ChapNonce {
            id: 9,
            challenge: [0x5a; OUR_CHALLENGE_LEN],
        })
    }

    // Expected values computed independently with coreutils:
    //   printf '<id><secret><challenge>' | md5sum

    #[test]
    fn chap_response_is_md5_of_id_secret_challenge() {
        // printf '\x01secret\x00\x01…\x0f' | md5sum
        assert_eq!(
            chap_response(0x01, b"secret", &hex("000102030405060708090a0b0c0d0e0f")).to_vec(),
            hex("740e86463bda3a4d7017d6e0fba0699d")
        );
        // printf '\xfftgt-target-secret\xde\xad\xbe\xef…' | md5sum
        assert_eq!(
            chap_response(
                0xff,
                b"tgt-target-secret",
                &hex("deadbeefdeadbeefdeadbeefdeadbeef")
            )
            .to_vec(),
            hex("2814e56ebeebb9e4598c0a4599e9a906")
        );
    }

    #[test]
    fn chap_response_covers_the_identifier_byte() {
        // printf '\x00' | md5sum ; printf '\x2a' | md5sum
        assert_eq!(
            chap_response(0, b"", b"").to_vec(),
            hex("93b885adfe0da089cdf634904fd59f71")
        );
        assert_eq!(
            chap_response(0x2a, b"", b"").to_vec(),
            hex("3389dae361af79b04c9c8e7057f60cc6")
        );
    }

    #[test]
    fn one_way_chap_answers_with_name_and_md5_response() {
        // Arrange
        let mut chap = one_way();
        assert_eq!(chap.algorithm_offer(), kv(&[("CHAP_A", "5")]));
        let challenge = kv(&[
            ("CHAP_A", "5"),
            ("CHAP_I", "7"),
            ("CHAP_C", CHALLENGE_00_0F),
        ]);
        // Act
        let reply = chap.handle_challenge(&challenge).unwrap();
        // Assert: printf '\x07initiator-secret\x00…\x0f' | md5sum
        assert_eq!(
            reply,
            kv(&[
                ("CHAP_N", "init-user"),
                ("CHAP_R", "0xa172b718126bb3191344d50be137ec5e")
            ])
        );
        assert!(chap.is_done());
        assert_eq!(chap.verify_target(&[]), Ok(()));
    }

    #[test]
    fn base64_challenge_gives_the_same_response() {
        let mut chap = one_way();
        // base64 of 00 01 … 0f
        let challenge = kv(&[
            ("CHAP_A", "5"),
            ("CHAP_I", "0x07"),
            ("CHAP_C", "0bAAECAwQFBgcICQoLDA0ODw=="),
        ]);
        let reply = chap.handle_challenge(&challenge).unwrap();
        assert_eq!(reply[1].1, "0xa172b718126bb3191344d50be137ec5e");
    }

    #[test]
    fn wrong_secret_gives_a_different_response() {
        let mut chap = ChapInitiator::new("init-user", Secret::new("wrong-secret"), None).unwrap();
        let reply = chap
            .handle_challenge(&kv(&[
                ("CHAP_A", "5"),
                ("CHAP_I", "7"),
                ("CHAP_C", CHALLENGE_00_0F),
            ]))
            .unwrap();
        assert_ne!(reply[1].1, "0xa172b718126bb3191344d50be137ec5e");
    }

    #[test]
    fn mutual_chap_sends_our_challenge_and_accepts_the_right_target_response() {
        // Arrange: our identifier 200 and challenge 0x10..0x1f are fixed.
        let mut chap = mutual();
        let our_challenge: [u8; 16] = core::array::from_fn(|i| 0x10 + i as u8);
        let target_challenge = kv(&[
            ("CHAP_A", "5"),
            ("CHAP_I", "7"),
            ("CHAP_C", CHALLENGE_00_0F),
        ]);
        // Act
        let reply = chap.respond(&target_challenge, 200, our_challenge).unwrap();
        // Assert
        assert_eq!(
            reply,
            kv(&[
                ("CHAP_N", "init-user"),
                ("CHAP_R", "0xa172b718126bb3191344d50be137ec5e"),
                ("CHAP_I", "200"),
                ("CHAP_C", "0x101112131415161718191a1b1c1d1e1f"),
            ])
        );
        assert!(!chap.is_done());
        // printf '\xc8target-secret\x10…\x1f' | md5sum
        let target_answer = kv(&[
            ("CHAP_N", "target-user"),
            ("CHAP_R", "0x0e89333d32830c86b982da052f0e7818"),
        ]);
        assert_eq!(chap.verify_target(&target_answer), Ok(()));
        assert!(chap.is_done());
        assert_eq!(
            chap.verify_target(&target_answer),
            Err(ChapError::OutOfOrder("target verified twice"))
        );
    }

    #[test]
    fn mutual_chap_with_wrong_target_secret_fails() {
        let mut chap = mutual();
        chap.respond(
            &kv(&[
                ("CHAP_A", "5"),
                ("CHAP_I", "7"),
                ("CHAP_C", CHALLENGE_00_0F),
            ]),
            200,
            core::array::from_fn(|i| 0x10 + i as u8),
        )
        .unwrap();
        let forged = kv(&[
            ("CHAP_N", "target-user"),
            ("CHAP_R", "0x0e89333d32830c86b982da052f0e7819"),
        ]);

        let err = chap.verify_target(&forged).unwrap_err();

        assert_eq!(
            err,
            ChapError::MutualAuthFailed {
                reason: "target CHAP_R is wrong (the target does not know the secret)"
            }
        );
        assert!(!chap.is_done());
    }

    #[test]
    fn mutual_chap_with_wrong_target_name_or_missing_keys_fails() {
        let mut chap = mutual();
        chap.respond(
            &kv(&[
                ("CHAP_A", "5"),
                ("CHAP_I", "7"),
                ("CHAP_C", CHALLENGE_00_0F),
            ]),
            200,
            core::array::from_fn(|i| 0x10 + i as u8),
        )
        .unwrap();
        for (keys, reason) in [
            (
                kv(&[
                    ("CHAP_N", "evil"),
                    ("CHAP_R", "0x0e89333d32830c86b982da052f0e7818"),
                ]),
                "target CHAP_N is not the configured target user",
            ),
            (
                kv(&[("CHAP_R", "0x0e89333d32830c86b982da052f0e7818")]),
                "target sent no CHAP_N",
            ),
            (kv(&[("CHAP_N", "target-user")]), "target sent no CHAP_R"),
            (
                kv(&[("CHAP_N", "target-user"), ("CHAP_R", "0x0e89")]),
                "target CHAP_R is not 16 bytes long",
            ),
        ] {
            assert_eq!(
                chap.verify_target(&keys),
                Err(ChapError::MutualAuthFailed { reason })
            );
        }
        assert!(matches!(
            chap.verify_target(&kv(&[("CHAP_N", "target-user"), ("CHAP_R", "zz")])),
            Err(ChapError::BadValue { key: "CHAP_R", .. })
        ));
    }

    #[test]
    fn target_reflecting_our_response_fails() {
        let mut chap = mutual();
        let reply = chap
            .respond(
                &kv(&[
                    ("CHAP_A", "5"),
                    ("CHAP_I", "7"),
                    ("CHAP_C", CHALLENGE_00_0F),
                ]),
                7,
                hex("000102030405060708090a0b0c0d0e0f").try_into().unwrap(),
            )
            .unwrap();
        // We never send the target's challenge back as ours.
        assert_ne!(reply[3].1, CHALLENGE_00_0F);
        let reflected = kv(&[("CHAP_N", "target-user"), ("CHAP_R", &reply[1].1)]);

        let err = chap.verify_target(&reflected).unwrap_err();

        assert_eq!(
            err,
            ChapError::MutualAuthFailed {
                reason: "target reflected our own CHAP response"
            }
        );
    }

    #[test]
    fn mutual_chap_sends_the_nonce_it_was_given() {
        let challenge = kv(&[
            ("CHAP_A", "5"),
            ("CHAP_I", "7"),
            ("CHAP_C", CHALLENGE_00_0F),
        ]);
        let reply = mutual().handle_challenge(&challenge).unwrap();
        assert_eq!(reply[2], ("CHAP_I".to_string(), "9".to_string()));
        assert_eq!(reply[3].0, "CHAP_C");
        assert_eq!(reply[3].1, format!("0x{}", "5a".repeat(OUR_CHALLENGE_LEN)));
    }

    #[test]
    fn mutual_chap_without_a_nonce_is_refused_not_answered_with_zeros() {
        let mut chap = ChapInitiator::new(
            "init-user",
            Secret::new("initiator-secret"),
            Some(("target-user".into(), Secret::new("target-secret"))),
        )
        .unwrap();
        let challenge = kv(&[
            ("CHAP_A", "5"),
            ("CHAP_I", "7"),
            ("CHAP_C", CHALLENGE_00_0F),
        ]);
        assert!(matches!(
            chap.handle_challenge(&challenge),
            Err(ChapError::Random(_))
        ));
    }

    #[test]
    fn same_secret_in_both_directions_is_refused() {
        let err = ChapInitiator::new(
            "init-user",
            Secret::new("shared-secret"),
            Some(("target-user".into(), Secret::new("shared-secret"))),
        )
        .unwrap_err();
        assert_eq!(err, ChapError::SameSecretBothWays);
        assert_eq!(
            ChapInitiator::new("u", Secret::new(""), None).unwrap_err(),
            ChapError::EmptySecret
        );
        assert_eq!(
            ChapInitiator::new("", Secret::new("s"), None).unwrap_err(),
            ChapError::EmptyUser
        );
    }

    #[test]
    fn unsupported_algorithm_is_refused() {
        let mut chap = one_way();
        let err = chap
            .handle_challenge(&kv(&[
                ("CHAP_A", "7"),
                ("CHAP_I", "1"),
                ("CHAP_C", CHALLENGE_00_0F),
            ]))
            .unwrap_err();
        assert_eq!(err, ChapError::UnsupportedAlgorithm { value: "7".into() });
        let err = one_way()
            .handle_challenge(&kv(&[("CHAP_A", "Reject")]))
            .unwrap_err();
        assert!(matches!(err, ChapError::UnsupportedAlgorithm { .. }));
    }

    #[test]
    fn missing_or_malformed_challenge_keys_are_refused() {
        let cases: [(&[(&str, &str)], ChapError); 5] = [
            (
                &[("CHAP_I", "1"), ("CHAP_C", CHALLENGE_00_0F)],
                ChapError::MissingKey { key: "CHAP_A" },
            ),
            (
                &[("CHAP_A", "5"), ("CHAP_C", CHALLENGE_00_0F)],
                ChapError::MissingKey { key: "CHAP_I" },
            ),
            (
                &[("CHAP_A", "5"), ("CHAP_I", "1")],
                ChapError::MissingKey { key: "CHAP_C" },
            ),
            (
                &[
                    ("CHAP_A", "5"),
                    ("CHAP_I", "256"),
                    ("CHAP_C", CHALLENGE_00_0F),
                ],
                ChapError::BadIdentifier {
                    value: "256".into(),
                },
            ),
            (
                &[
                    ("CHAP_A", "5"),
                    ("CHAP_I", "x"),
                    ("CHAP_C", CHALLENGE_00_0F),
                ],
                ChapError::BadIdentifier { value: "x".into() },
            ),
        ];
        for (keys, expected) in cases {
            assert_eq!(one_way().handle_challenge(&kv(keys)), Err(expected));
        }
        let err = one_way()
            .handle_challenge(&kv(&[
                ("CHAP_A", "5"),
                ("CHAP_I", "1"),
                ("CHAP_C", "0xnothex"),
            ]))
            .unwrap_err();
        assert!(matches!(err, ChapError::BadValue { key: "CHAP_C", .. }));
    }

    #[test]
    fn challenge_too_short_or_too_long_is_refused() {
        let short = format!("0x{}", "ab".repeat(15));
        let long = format!("0x{}", "ab".repeat(1025));
        let longest = format!("0x{}", "ab".repeat(1024));
        let keys = |c: &str| kv(&[("CHAP_A", "5"), ("CHAP_I", "1"), ("CHAP_C", c)]);

        assert_eq!(
            one_way().handle_challenge(&keys(&short)),
            Err(ChapError::BadChallengeLength { len: 15 })
        );
        assert_eq!(
            one_way().handle_challenge(&keys(&long)),
            Err(ChapError::BadChallengeLength { len: 1025 })
        );
        assert!(one_way().handle_challenge(&keys(&longest)).is_ok());
    }

    #[test]
    fn second_challenge_is_out_of_order() {
        let mut chap = one_way();
        let keys = kv(&[
            ("CHAP_A", "5"),
            ("CHAP_I", "1"),
            ("CHAP_C", CHALLENGE_00_0F),
        ]);
        chap.handle_challenge(&keys).unwrap();
        assert!(matches!(
            chap.handle_challenge(&keys),
            Err(ChapError::OutOfOrder(_))
        ));
        assert!(matches!(
            mutual().verify_target(&[]),
            Err(ChapError::OutOfOrder(_))
        ));
    }

    #[test]
    fn secrets_never_show_in_debug_or_errors() {
        let chap = mutual();
        let dump = format!("{chap:?}");
        assert!(!dump.contains("initiator-secret"), "{dump}");
        assert!(!dump.contains("target-secret"), "{dump}");
        let err = ChapInitiator::new(
            "u",
            Secret::new("hunter2hunter2"),
            Some(("t".into(), Secret::new("hunter2hunter2"))),
        )
        .unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
    }

    #[test]
    fn auth_method_offer_never_includes_none_with_chap() {
        assert_eq!(
            auth_method_offer(true),
            ("AuthMethod".into(), "CHAP".into())
        );
        assert_eq!(
            auth_method_offer(false),
            ("AuthMethod".into(), "None".into())
        );
        assert_eq!(check_auth_method_answer("CHAP", true), Ok(AuthMethod::Chap));
        assert_eq!(
            check_auth_method_answer("None", false),
            Ok(AuthMethod::None)
        );
        assert!(check_auth_method_answer("None", true).is_err());
        assert!(check_auth_method_answer("Reject", true).is_err());
        assert!(check_auth_method_answer("CHAP", false).is_err());
    }

    #[test]
    fn security_keys_are_recognised() {
        for k in [
            "AuthMethod",
            "CHAP_A",
            "CHAP_R",
            "SRP_U",
            "KRB_AP_REQ",
            "SPKM_REQ",
        ] {
            assert!(is_security_key(k), "{k}");
        }
        for k in ["TargetPortalGroupTag", "HeaderDigest", "CHAP"] {
            assert!(!is_security_key(k), "{k}");
        }
    }
}
