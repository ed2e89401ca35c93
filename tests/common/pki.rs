//! Certificates made inside the TLS tests: a CA, a serving certificate for 127.0.0.1 and
//! localhost, and a client certificate, written as PEM files into a directory. Included with
//! `#[path = "common/pki.rs"] mod pki;` by the tests that need it.
// Each test crate uses the helpers its tests need: the others go unused in it.
#![allow(dead_code)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType};

/// The files are in `dir`: `ca.crt`, `tls.crt` and `tls.key` (the server's), `client.crt` and
/// `client.key`; the client's PEM also in memory.
pub(crate) struct Pki {
    pub dir: PathBuf,
    pub ca_pem: String,
    pub client_pem: String,
    pub client_key: String,
}

/// Makes the certificates in `dir` (which must exist).
pub(crate) fn pki(dir: PathBuf) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "kausality-stream test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let mut sp = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    sp.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    sp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = sp.signed_by(&server_key, &issuer).unwrap();

    let client_key = KeyPair::generate().unwrap();
    let mut cp = CertificateParams::new(Vec::<String>::new()).unwrap();
    cp.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    cp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = cp.signed_by(&client_key, &issuer).unwrap();

    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), server_cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), server_key.serialize_pem()).unwrap();
    std::fs::write(dir.join("client.crt"), client_cert.pem()).unwrap();
    std::fs::write(dir.join("client.key"), client_key.serialize_pem()).unwrap();
    Pki { ca_pem: ca_cert.pem(), client_pem: client_cert.pem(), client_key: client_key.serialize_pem(), dir }
}
