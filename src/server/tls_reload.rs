//! The TLS identity of an HTTP/1 listener (today the webhook port's, whose flags the errors
//! name), re-read when its files change (as cert-manager and kubelet rotate a mounted
//! Secret): each new connection uses the newest certificate that loads; a pair that fails to
//! load keeps the last good one (with a warning).

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How often the files are looked at (at most once per interval, on a new connection).
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A certificate and key pair that follows its files.
pub struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<State>,
}

struct State {
    checked: Instant,
    stamp: Stamp,
    acceptor: TlsAcceptor,
}

/// What tells a file changed: its modification time and length, of both files.
type Stamp = [Option<(SystemTime, u64)>; 2];

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    [one(cert), one(key)]
}

/// Why the webhook's certificate and key do not load; the message names the flag and file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{flag} {}: {source}", .path.display())]
    Read {
        /// `--webhook-tls-cert` or `--webhook-tls-key`.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file is not PEM certificates.
    #[error("--webhook-tls-cert {}: {source}", .path.display())]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate file holds no certificate.
    #[error("--webhook-tls-cert {}: no certificate in the file", .0.display())]
    NoCertificate(PathBuf),
    /// The key file is not a PEM private key.
    #[error("--webhook-tls-key {}: {source}", .path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The TLS library refuses its default protocol versions.
    #[error(transparent)]
    Protocols(rustls::Error),
    /// The certificate and key do not make an identity.
    #[error("--webhook-tls-cert/--webhook-tls-key: {0}")]
    Identity(#[source] rustls::Error),
}

impl Reloading {
    /// Loads the pair; an error names the file that failed.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Reloading>, TlsError> {
        let stamp = stamp(cert, key);
        let acceptor = acceptor(cert, key)?;
        Ok(Arc::new(Reloading {
            cert: cert.to_owned(),
            key: key.to_owned(),
            state: Mutex::new(State {
                checked: Instant::now(),
                stamp,
                acceptor,
            }),
        }))
    }

    /// The acceptor for a new connection, reloading first when the files changed.
    pub fn acceptor(&self) -> TlsAcceptor {
        let mut st = self.state.lock();
        if st.checked.elapsed() >= CHECK_EVERY {
            st.checked = Instant::now();
            let now = stamp(&self.cert, &self.key);
            if now != st.stamp {
                match acceptor(&self.cert, &self.key) {
                    Ok(a) => {
                        st.acceptor = a;
                        st.stamp = now;
                        tracing::info!(cert = %self.cert.display(), "webhook certificate reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook certificate not reloaded; keeping the last good one");
                    }
                }
            }
        }
        st.acceptor.clone()
    }
}

fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let read = |flag: &'static str, p: &Path| {
        std::fs::read(p).map_err(|source| TlsError::Read {
            flag,
            path: p.to_owned(),
            source,
        })
    };
    let cert_pem = read("--webhook-tls-cert", cert)?;
    let key_pem = read("--webhook-tls-key", key)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Certificate {
            path: cert.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_owned()));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| TlsError::Key {
        path: key.to_owned(),
        source,
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(TlsError::Protocols)?
    .with_no_client_auth()
    .with_single_cert(chain, key_der)
    .map_err(TlsError::Identity)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
