//! The rustls server configuration of an HTTPS listener, from PEM files.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

use super::Error;

/// `tls`: the serving certificate and, for mutual TLS, the client CA (of the webhook source
/// and of the query API).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first. Required.
    pub cert: std::path::PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1). Required.
    pub key: std::path::PathBuf,
    /// PEM CA bundle: when set, only clients with a certificate that chains to it are
    /// accepted (the API server's kubeconfig `client-certificate`). Default: none.
    #[serde(default)]
    pub client_ca: Option<std::path::PathBuf>,
}

impl TlsConfig {
    /// The rustls configuration of these files.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, Error> {
        server_config(&self.cert, &self.key, self.client_ca.as_deref())
    }
}

fn tls_err(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Tls { path: path.display().to_string(), message: message.to_string() }
}

/// Builds the server side of TLS: `cert` (chain, leaf first) and `key`; with `client_ca`, a
/// client certificate chaining to it is required. Only ring is compiled in (no aws-lc build).
pub fn server_config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Arc<ServerConfig>, Error> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| tls_err(cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| tls_err(cert, e))?;
    if certs.is_empty() {
        return Err(tls_err(cert, "no PEM certificate in the file"));
    }
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|e| tls_err(key, format!("no usable PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(cert, e))?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).map_err(|e| tls_err(ca, e))? {
                roots.add(c.map_err(|e| tls_err(ca, e))?).map_err(|e| tls_err(ca, e))?;
            }
            if roots.is_empty() {
                return Err(tls_err(ca, "no PEM certificate in the CA file"));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| tls_err(ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key_der)
        .map_err(|e| tls_err(key, format!("certificate and key do not fit: {e}")))?;
    // Only HTTP/1.1 is served; advertising it lets Go's client (the API server) skip h2.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
