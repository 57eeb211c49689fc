//! The few X.509 certificates and keys a test control plane needs.
//!
//! A test CA (ECDSA P-256) signs client certificates whose subject is
//! `CN=<user>, O=<group>, O=<group>, ...`, which is how kube-apiserver's
//! `--client-ca-file` authenticator reads a user name and groups. The DER is
//! written here with `yasna` and signed with `ring` because the usual
//! generators keep one value per attribute type, and a user may be in several
//! groups (several `O` attributes).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair as _};
use yasna::models::ObjectIdentifier;
use yasna::{DERWriter, Tag};

use crate::Error;

const OID_COMMON_NAME: &[u64] = &[2, 5, 4, 3];
const OID_ORGANIZATION: &[u64] = &[2, 5, 4, 10];
const OID_EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
const OID_PRIME256V1: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];
const OID_ECDSA_WITH_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
const OID_SUBJECT_KEY_IDENTIFIER: &[u64] = &[2, 5, 29, 14];
const OID_KEY_USAGE: &[u64] = &[2, 5, 29, 15];
const OID_BASIC_CONSTRAINTS: &[u64] = &[2, 5, 29, 19];
const OID_EXTENDED_KEY_USAGE: &[u64] = &[2, 5, 29, 37];
const OID_AUTHORITY_KEY_IDENTIFIER: &[u64] = &[2, 5, 29, 35];
const OID_KP_CLIENT_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 2];
const OID_KP_SERVER_AUTH: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 1];
const OID_SUBJECT_ALT_NAME: &[u64] = &[2, 5, 29, 17];

/// How long the certificates are valid: long enough for a local control plane
/// left running, short enough to stay in UTCTime (before 2050).
const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Allowance for clock skew.
const BACKDATE: Duration = Duration::from_secs(3600);

fn pki_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Certificate(format!("{what}: {e}"))
}

/// An ECDSA P-256 key pair, kept as its PKCS#8 document.
pub(crate) struct Key {
    pkcs8: Vec<u8>,
    pair: EcdsaKeyPair,
}

impl Key {
    /// Generates a new key.
    pub(crate) fn generate(rng: &SystemRandom) -> Result<Self, Error> {
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, rng)
            .map_err(|e| pki_error("generating an ECDSA key", e))?;
        let pkcs8 = doc.as_ref().to_vec();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, rng)
            .map_err(|e| pki_error("loading an ECDSA key", e))?;
        Ok(Self { pkcs8, pair })
    }

    /// The private key as PEM (`PRIVATE KEY`, PKCS#8).
    pub(crate) fn private_key_pem(&self) -> String {
        pem("PRIVATE KEY", &self.pkcs8)
    }

    /// The DER `SubjectPublicKeyInfo`.
    fn spki_der(&self) -> Vec<u8> {
        yasna::construct_der(|w| self.write_spki(w))
    }

    /// The public key as PEM (`PUBLIC KEY`, SubjectPublicKeyInfo).
    pub(crate) fn public_key_pem(&self) -> String {
        pem("PUBLIC KEY", &self.spki_der())
    }

    fn write_spki(&self, w: DERWriter<'_>) {
        w.write_sequence(|w| {
            w.next().write_sequence(|w| {
                w.next().write_oid(&oid(OID_EC_PUBLIC_KEY));
                w.next().write_oid(&oid(OID_PRIME256V1));
            });
            let point = self.pair.public_key().as_ref();
            w.next().write_bitvec_bytes(point, point.len() * 8);
        });
    }

    /// A key identifier: the first 160 bits of the SHA-256 of the public key
    /// (RFC 7093, method 1).
    fn key_id(&self) -> Vec<u8> {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.pair.public_key().as_ref());
        digest.as_ref()[..20].to_vec()
    }

    fn sign(&self, rng: &SystemRandom, message: &[u8]) -> Result<Vec<u8>, Error> {
        self.pair
            .sign(rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|e| pki_error("signing a certificate", e))
    }
}

/// The test certificate authority that signs client certificates.
pub(crate) struct Ca {
    key: Key,
    subject_der: Vec<u8>,
    cert_der: Vec<u8>,
    rng: SystemRandom,
}

/// A certificate (client or serving) and its key, both PEM.
pub(crate) struct Issued {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

impl Issued {
    /// Writes the certificate and the key as `dir/<stem>.crt` and `dir/<stem>.key` and
    /// returns the two paths.
    pub(crate) fn write_pair(
        &self,
        dir: &std::path::Path,
        stem: &str,
    ) -> Result<(std::path::PathBuf, std::path::PathBuf), Error> {
        let (cert, key) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        crate::write_file(&cert, &self.cert_pem)?;
        crate::write_file(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// Creates a new self-signed CA.
    pub(crate) fn generate() -> Result<Self, Error> {
        let rng = SystemRandom::new();
        let key = Key::generate(&rng)?;
        let subject_der = name_der("ccm-test-ca", &[]);
        let key_id = key.key_id();
        let cert_der = build_certificate(&rng, &key, &subject_der, &subject_der, &key, |w| {
            w.write_sequence(|w| {
                extension(w.next(), OID_BASIC_CONSTRAINTS, true, |w| {
                    w.write_sequence(|w| w.next().write_bool(true));
                });
                // digitalSignature (0), keyCertSign (5), cRLSign (6).
                extension(w.next(), OID_KEY_USAGE, true, |w| {
                    w.write_bitvec_bytes(&[0b1000_0110], 7);
                });
                extension(w.next(), OID_SUBJECT_KEY_IDENTIFIER, false, |w| {
                    w.write_bytes(&key_id);
                });
            });
        })?;
        Ok(Self {
            key,
            subject_der,
            cert_der,
            rng,
        })
    }

    /// The CA certificate as PEM, for `--client-ca-file`.
    pub(crate) fn cert_pem(&self) -> String {
        pem("CERTIFICATE", &self.cert_der)
    }

    /// Issues a client certificate with `CN=user` and one `O` per group.
    pub(crate) fn issue_client(&self, user: &str, groups: &[&str]) -> Result<Issued, Error> {
        if user.is_empty() {
            return Err(Error::Certificate("the user name is empty".into()));
        }
        self.issue(&name_der(user, groups), OID_KP_CLIENT_AUTH, &[], &[])
    }

    /// Issues a serving certificate for these DNS names and IP addresses (its subject
    /// alternative names; `CN` is the first DNS name).
    pub(crate) fn issue_server(
        &self,
        dns_names: &[&str],
        ips: &[std::net::IpAddr],
    ) -> Result<Issued, Error> {
        let common_name = dns_names.first().copied().unwrap_or("ccm-test");
        self.issue(
            &name_der(common_name, &[]),
            OID_KP_SERVER_AUTH,
            dns_names,
            ips,
        )
    }

    fn issue(
        &self,
        subject_der: &[u8],
        extended_key_usage: &[u64],
        dns_names: &[&str],
        ips: &[std::net::IpAddr],
    ) -> Result<Issued, Error> {
        let key = Key::generate(&self.rng)?;
        let authority_key_id = self.key.key_id();
        let cert_der = build_certificate(
            &self.rng,
            &self.key,
            &self.subject_der,
            subject_der,
            &key,
            |w| {
                w.write_sequence(|w| {
                    extension(w.next(), OID_BASIC_CONSTRAINTS, true, |w| {
                        w.write_sequence(|_| {});
                    });
                    // digitalSignature (0).
                    extension(w.next(), OID_KEY_USAGE, true, |w| {
                        w.write_bitvec_bytes(&[0b1000_0000], 1);
                    });
                    extension(w.next(), OID_EXTENDED_KEY_USAGE, false, |w| {
                        w.write_sequence(|w| w.next().write_oid(&oid(extended_key_usage)));
                    });
                    if !dns_names.is_empty() || !ips.is_empty() {
                        extension(w.next(), OID_SUBJECT_ALT_NAME, false, |w| {
                            write_general_names(w, dns_names, ips);
                        });
                    }
                    extension(w.next(), OID_AUTHORITY_KEY_IDENTIFIER, false, |w| {
                        w.write_sequence(|w| {
                            w.next().write_tagged_implicit(Tag::context(0), |w| {
                                w.write_bytes(&authority_key_id)
                            });
                        });
                    });
                });
            },
        )?;
        Ok(Issued {
            cert_pem: pem("CERTIFICATE", &cert_der),
            key_pem: key.private_key_pem(),
        })
    }
}

/// `GeneralNames`: `dNSName [2] IA5String` and `iPAddress [7] OCTET STRING` (4 or 16
/// bytes), as RFC 5280 writes a subject alternative name.
fn write_general_names(w: DERWriter<'_>, dns_names: &[&str], ips: &[std::net::IpAddr]) {
    w.write_sequence(|w| {
        for name in dns_names {
            w.next()
                .write_tagged_implicit(Tag::context(2), |w| w.write_ia5_string(name));
        }
        for ip in ips {
            let octets = match ip {
                std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
                std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
            };
            w.next()
                .write_tagged_implicit(Tag::context(7), |w| w.write_bytes(&octets));
        }
    });
}

/// A key pair for signing ServiceAccount tokens.
pub(crate) fn service_account_key() -> Result<Key, Error> {
    Key::generate(&SystemRandom::new())
}

fn oid(arcs: &[u64]) -> ObjectIdentifier {
    ObjectIdentifier::from_slice(arcs)
}

/// `Name ::= SEQUENCE OF RelativeDistinguishedName`, one attribute per RDN.
fn name_der(common_name: &str, organizations: &[&str]) -> Vec<u8> {
    yasna::construct_der(|w| {
        w.write_sequence(|w| {
            let mut attribute = |arcs: &[u64], value: &str| {
                w.next().write_set(|w| {
                    w.next().write_sequence(|w| {
                        w.next().write_oid(&oid(arcs));
                        w.next().write_utf8_string(value);
                    });
                });
            };
            for organization in organizations {
                attribute(OID_ORGANIZATION, organization);
            }
            attribute(OID_COMMON_NAME, common_name);
        });
    })
}

fn extension(w: DERWriter<'_>, arcs: &[u64], critical: bool, value: impl FnOnce(DERWriter<'_>)) {
    w.write_sequence(|w| {
        w.next().write_oid(&oid(arcs));
        if critical {
            w.next().write_bool(true);
        }
        w.next().write_bytes(&yasna::construct_der(value));
    });
}

fn write_signature_algorithm(w: DERWriter<'_>) {
    w.write_sequence(|w| w.next().write_oid(&oid(OID_ECDSA_WITH_SHA256)));
}

/// `UTCTime` (`YYMMDDHHMMSSZ`) for a time between 1950 and 2049.
fn write_utc_time(w: DERWriter<'_>, time: SystemTime) {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let text = format!(
        "{:02}{:02}{:02}{:02}{:02}{:02}Z",
        year % 100,
        month,
        day,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    w.write_tagged_implicit(yasna::tags::TAG_UTCTIME, |w| w.write_bytes(text.as_bytes()));
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn build_certificate(
    rng: &SystemRandom,
    issuer_key: &Key,
    issuer_der: &[u8],
    subject_der: &[u8],
    subject_key: &Key,
    extensions: impl FnOnce(DERWriter<'_>),
) -> Result<Vec<u8>, Error> {
    let mut serial = [0u8; 16];
    rng.fill(&mut serial)
        .map_err(|e| pki_error("generating a serial number", e))?;
    serial[0] &= 0x7f;
    serial[0] |= 0x01; // positive and of full length
    let now = SystemTime::now();
    let tbs = yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_tagged(Tag::context(0), |w| w.write_u8(2)); // v3
            w.next().write_bigint_bytes(&serial, true);
            write_signature_algorithm(w.next());
            w.next().write_der(issuer_der);
            w.next().write_sequence(|w| {
                write_utc_time(w.next(), now - BACKDATE);
                write_utc_time(w.next(), now + VALIDITY);
            });
            w.next().write_der(subject_der);
            subject_key.write_spki(w.next());
            w.next().write_tagged(Tag::context(3), extensions);
        });
    });
    let signature = issuer_key.sign(rng, &tbs)?;
    Ok(yasna::construct_der(|w| {
        w.write_sequence(|w| {
            w.next().write_der(&tbs);
            write_signature_algorithm(w.next());
            w.next().write_bitvec_bytes(&signature, signature.len() * 8);
        });
    }))
}

/// The DER of every `CERTIFICATE` block of a PEM text (others are skipped).
pub(crate) fn pem_certificates(text: &str) -> Vec<Vec<u8>> {
    let mut certs = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if line == "-----BEGIN CERTIFICATE-----" {
            body = Some(String::new());
        } else if line == "-----END CERTIFICATE-----" {
            if let Some(Ok(der)) = body
                .take()
                .map(|b64| base64::engine::general_purpose::STANDARD.decode(b64))
            {
                certs.push(der);
            }
        } else if let Some(b64) = body.as_mut() {
            b64.push_str(line);
        }
    }
    certs
}

/// PEM with 64-column lines.
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn name_has_one_organization_per_group() {
        let der = name_der("alice", &["dev", "ops"]);
        let parsed = yasna::parse_der(&der, |r| {
            r.collect_sequence_of(|r| {
                r.read_set_of(|r| {
                    r.read_sequence(|r| {
                        let oid = r.next().read_oid()?;
                        let value = r.next().read_utf8string()?;
                        Ok((oid.components().to_vec(), value))
                    })
                    .map(|_| ())
                })
            })
        });
        // Three RDNs: O=dev, O=ops, CN=alice.
        assert_eq!(parsed.map(|v| v.len()).ok(), Some(3));
    }

    #[test]
    fn pem_round_trip() {
        let ca = Ca::generate().unwrap();
        let bundle = format!("{}{}", ca.cert_pem(), pem("CERTIFICATE", b"second"));
        let certs = pem_certificates(&bundle);
        assert_eq!(certs.len(), 2);
        assert_eq!(certs[0], ca.cert_der);
        assert_eq!(certs[1], b"second");
        // An unfinished block is not a certificate.
        assert!(pem_certificates("-----BEGIN CERTIFICATE-----\nAAAA\n").is_empty());
    }

    #[test]
    fn pem_is_wrapped_at_64_columns() {
        let text = pem("CERTIFICATE", &[0u8; 100]);
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert!(text.ends_with("-----END CERTIFICATE-----\n"));
        assert!(text.lines().all(|l| l.len() <= 64));
    }
}
