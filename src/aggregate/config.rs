//! Which upstreams an aggregator follows: `--upstream NAME=URL` flags and an `--upstreams`
//! file (YAML or JSON), re-read when its content changes.
//!
//! ```yaml
//! upstreams:
//!   - name: eu-west-1                       # the cluster's name (metrics, filters, errors)
//!     url: https://kartograf.eu-west-1.example.com:50051
//!     caFile: /etc/kartograf/upstreams/ca.crt      # CA of the upstream's certificate
//!     certFile: /etc/kartograf/upstreams/tls.crt   # client certificate (mTLS), with keyFile
//!     keyFile: /etc/kartograf/upstreams/tls.key
//!     tokenFile: /etc/kartograf/upstreams/eu-west-1.token   # bearer token, read at each connect
//!     serverName: kartograf.eu-west-1.example.com  # name to verify (default: the URL's host)
//!     clusters: [prod]     # other cluster names its graphs may carry (shards, aggregators)
//! ```
//!
//! An upstream speaks only for its own name and the `clusters` it lists (`--upstream
//! NAME@CLUSTER=URL` on the command line); `"*"` lets it speak for any cluster no other
//! upstream names or lists (an aggregator of clusters not followed here otherwise).

use crate::server::validate::{MAX_CLUSTER_BYTES, is_cluster_name};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// How to reach one upstream kartograf.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Its name: the cluster its graphs belong to when they name none, the `cluster` label
    /// of its metrics, and what errors call it.
    pub name: String,
    /// `http://host:port` or `https://host:port`.
    pub url: String,
    /// PEM CA bundle that signed the upstream's certificate (needed for `https`).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with `key_file`).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// A file holding the bearer token to send (re-read at every connect, so a rotated
    /// token is used from the next reconnect on).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The name the upstream's certificate must carry (default: the URL's host).
    #[serde(default)]
    pub server_name: Option<String>,
    /// Cluster names its graphs may carry besides its own name (namespace shards of one
    /// cluster, or an upstream that is an aggregator itself); `*` is any name that no other
    /// upstream names or lists. Graphs naming any other cluster are refused.
    #[serde(default)]
    pub clusters: Vec<String>,
}

/// In [`UpstreamConfig::clusters`]: any cluster that no other upstream names or lists.
pub const ANY_CLUSTER: &str = "*";

/// Cluster names one upstream may list.
pub const MAX_CLUSTERS: usize = 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    upstreams: Vec<UpstreamConfig>,
}

/// Why one upstream's settings are refused; the message names the upstream and the field.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A name that is not a cluster name.
    #[error(
        "upstream name {:?} is not a cluster name: 1 to {MAX_CLUSTER_BYTES} bytes without whitespace, control characters or '='",
        crate::excerpt::echo(.name)
    )]
    Name {
        /// The name.
        name: String,
    },
    /// A url that is not a URI.
    #[error("upstream {name}: url {url:?}: {source}")]
    Url {
        /// The upstream.
        name: String,
        /// Its url.
        url: String,
        /// Why it does not parse.
        #[source]
        source: tonic::codegen::http::uri::InvalidUri,
    },
    /// A url of another scheme than `http` or `https`.
    #[error("upstream {name}: url {url:?} must start with http:// or https://")]
    Scheme {
        /// The upstream.
        name: String,
        /// Its url.
        url: String,
    },
    /// A url without a host.
    #[error("upstream {name}: url {url:?} has no host")]
    NoHost {
        /// The upstream.
        name: String,
        /// Its url.
        url: String,
    },
    /// An `https` url without `caFile`.
    #[error(
        "upstream {name}: an https url needs caFile (the CA that signed the upstream's certificate)"
    )]
    NoCa {
        /// The upstream.
        name: String,
    },
    /// TLS settings on an `http` url.
    #[error("upstream {name}: caFile, certFile and serverName need an https url")]
    TlsWithoutHttps {
        /// The upstream.
        name: String,
    },
    /// `certFile` without `keyFile`, or the other way round.
    #[error("upstream {name}: certFile and keyFile go together")]
    CertWithoutKey {
        /// The upstream.
        name: String,
    },
    /// More than [`MAX_CLUSTERS`] clusters.
    #[error("upstream {name}: more than {MAX_CLUSTERS} clusters listed")]
    TooManyClusters {
        /// The upstream.
        name: String,
    },
    /// A listed cluster that is not a cluster name.
    #[error(
        "upstream {name}: clusters: {:?} is not a cluster name (1 to {MAX_CLUSTER_BYTES} bytes without whitespace or control characters, or \"*\")",
        crate::excerpt::echo(.cluster)
    )]
    Cluster {
        /// The upstream.
        name: String,
        /// The listed name.
        cluster: String,
    },
}

/// Why the upstreams (flags and file) are refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An `--upstream` flag without `=`.
    #[error("--upstream {flag:?}: expected NAME=URL")]
    Flag {
        /// The flag's value.
        flag: String,
    },
    /// An upstream's settings.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The upstreams file cannot be read.
    #[error("--upstreams {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The upstreams file does not parse.
    #[error("{}: {problem}", .path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        problem: FileProblem,
    },
    /// One name for two upstreams.
    #[error("upstream {name:?} is named twice")]
    Twice {
        /// The name.
        name: String,
    },
}

/// What is wrong in an upstreams file.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    /// Not UTF-8 text.
    #[error("not UTF-8")]
    NotUtf8,
    /// Not YAML or JSON.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// More than one document.
    #[error("expected one document")]
    Documents,
    /// Not the file's shape (unknown or mistyped fields).
    #[error(transparent)]
    Shape(#[from] serde_json::Error),
    /// An upstream's settings.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

impl UpstreamConfig {
    /// An upstream without TLS or token settings.
    pub fn new(name: &str, url: &str) -> UpstreamConfig {
        UpstreamConfig {
            name: name.to_owned(),
            url: url.to_owned(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            token_file: None,
            server_name: None,
            clusters: Vec::new(),
        }
    }

    /// Checks every field; the error names the upstream and the field.
    pub fn check(&self) -> Result<(), UpstreamError> {
        if !is_cluster_name(&self.name) || self.name.contains('=') {
            return Err(UpstreamError::Name {
                name: self.name.clone(),
            });
        }
        let name = || self.name.clone();
        let url = || self.url.clone();
        let uri: tonic::codegen::http::Uri =
            self.url.parse().map_err(|source| UpstreamError::Url {
                name: name(),
                url: url(),
                source,
            })?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(UpstreamError::Scheme {
                    name: name(),
                    url: url(),
                });
            }
        };
        if uri.host().is_none_or(str::is_empty) {
            return Err(UpstreamError::NoHost {
                name: name(),
                url: url(),
            });
        }
        if tls && self.ca_file.is_none() {
            return Err(UpstreamError::NoCa { name: name() });
        }
        if !tls
            && (self.ca_file.is_some() || self.cert_file.is_some() || self.server_name.is_some())
        {
            return Err(UpstreamError::TlsWithoutHttps { name: name() });
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(UpstreamError::CertWithoutKey { name: name() });
        }
        if self.clusters.len() > MAX_CLUSTERS {
            return Err(UpstreamError::TooManyClusters { name: name() });
        }
        if let Some(bad) = self
            .clusters
            .iter()
            .find(|c| c.as_str() != ANY_CLUSTER && !is_cluster_name(c))
        {
            return Err(UpstreamError::Cluster {
                name: name(),
                cluster: bad.clone(),
            });
        }
        Ok(())
    }
}

/// Parses one `--upstream NAME=URL` or `--upstream NAME@CLUSTER[@CLUSTER…]=URL` (the
/// clusters it may speak for besides its name).
pub fn parse_flag(flag: &str) -> Result<UpstreamConfig, ConfigError> {
    let (head, url) = flag.split_once('=').ok_or_else(|| ConfigError::Flag {
        flag: flag.to_owned(),
    })?;
    let mut parts = head.split('@');
    let name = parts.next().unwrap_or_default();
    let mut config = UpstreamConfig::new(name, url);
    config.clusters = parts.map(str::to_owned).collect();
    config.check()?;
    Ok(config)
}

/// Parses an upstreams file (`origin` names it in errors).
pub fn parse_file(text: &str, origin: &Path) -> Result<Vec<UpstreamConfig>, ConfigError> {
    file_upstreams(text).map_err(|problem| ConfigError::File {
        path: origin.to_owned(),
        problem,
    })
}

fn file_upstreams(text: &str) -> Result<Vec<UpstreamConfig>, FileProblem> {
    let docs = crate::manifest::parse_documents(text)?;
    let doc = match docs.as_slice() {
        [] => return Ok(Vec::new()),
        [one] => one.clone(),
        _ => return Err(FileProblem::Documents),
    };
    let file: File = serde_json::from_value(doc)?;
    for u in &file.upstreams {
        u.check()?;
    }
    Ok(file.upstreams)
}

/// The flags' upstreams and the file's together; a name given twice is an error.
pub fn merge(
    flags: &[UpstreamConfig],
    file: Vec<UpstreamConfig>,
) -> Result<Vec<UpstreamConfig>, ConfigError> {
    let mut all: Vec<UpstreamConfig> = flags.to_vec();
    for u in file {
        if all.iter().any(|a| a.name == u.name) {
            return Err(ConfigError::Twice { name: u.name });
        }
        all.push(u);
    }
    Ok(all)
}

/// An upstreams file as read: its bytes (what [`reload`] compares against) and its
/// upstreams merged with the flags' ones.
pub struct Loaded {
    /// The file's content.
    pub bytes: Vec<u8>,
    /// The flags' upstreams and the file's.
    pub upstreams: Vec<UpstreamConfig>,
}

/// Reads and parses an upstreams file, merged with the flags' upstreams.
pub fn load(path: &Path, flags: &[UpstreamConfig]) -> Result<Loaded, ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let upstreams = parsed(&bytes, path, flags)?;
    Ok(Loaded { bytes, upstreams })
}

fn parsed(
    bytes: &[u8],
    path: &Path,
    flags: &[UpstreamConfig],
) -> Result<Vec<UpstreamConfig>, ConfigError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ConfigError::File {
        path: path.to_owned(),
        problem: FileProblem::NotUtf8,
    })?;
    merge(flags, parse_file(text, path)?)
}

/// Re-reads `path` every `every` and, when its content changed since `loaded` (what the
/// aggregator follows now) and parses, makes the aggregator follow the flags' upstreams and
/// the file's; a file that does not parse (or cannot be read) keeps the last good
/// configuration, and says why in the log.
pub async fn reload(
    aggregator: std::sync::Arc<super::Aggregator>,
    path: PathBuf,
    flags: Vec<UpstreamConfig>,
    loaded: Vec<u8>,
    every: std::time::Duration,
) {
    let mut last = Some(loaded);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let now = tokio::fs::read(&path).await.ok();
        if now == last {
            continue;
        }
        last.clone_from(&now);
        let Some(bytes) = now else {
            tracing::warn!(file = %path.display(), "cannot read the upstreams file; keeping the upstreams in effect");
            continue;
        };
        match parsed(&bytes, &path, &flags) {
            Ok(all) => {
                tracing::info!(file = %path.display(), upstreams = all.len(), "upstreams file reloaded");
                aggregator.set_upstreams(all);
            }
            Err(e) => {
                tracing::warn!(
                    "the upstreams file does not parse; keeping the upstreams in effect: {e}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_name_equals_url() {
        let u = parse_flag("eu-1=http://kartograf.eu:50051").unwrap();
        assert_eq!(u, UpstreamConfig::new("eu-1", "http://kartograf.eu:50051"));
        let shard = parse_flag("team-a@prod=http://a:1").unwrap();
        assert_eq!(
            (shard.name.as_str(), shard.clusters),
            ("team-a", vec!["prod".into()])
        );
        let hub = parse_flag("hub@*=http://a:1").unwrap();
        assert_eq!(hub.clusters, ["*"]);
        for bad in [
            "eu-1",
            "team-a@=http://a:1",
            "=http://a:1",
            "eu 1=http://a:1",
            "eu=ftp://a:1",
            "eu=http://",
            "eu=https://a:1",
        ] {
            assert!(parse_flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn files_list_upstreams_with_their_credentials() {
        let text = "upstreams:\n  - name: eu\n    url: https://k.eu:50051\n    caFile: /ca.pem\n    tokenFile: /t\n  - name: us\n    url: http://k.us:50051\n";
        let all = parse_file(text, Path::new("u.yaml")).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].ca_file.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(all[1].token_file, None);
        let flags = [UpstreamConfig::new("eu", "http://x:1")];
        let e = merge(&flags, all).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Twice { name } if name == "eu"),
            "{e}"
        );
        assert_eq!(e.to_string(), r#"upstream "eu" is named twice"#);
        for (bad, says) in [
            (
                "upstreams:\n  - name: eu\n    url: http://a:1\n    token: x\n",
                "token",
            ),
            ("upstreams:\n  - name: eu\n    url: https://a:1\n", "caFile"),
            (
                "upstreams:\n  - name: eu\n    url: https://a:1\n    caFile: /c\n    certFile: /x\n",
                "keyFile",
            ),
            ("upstreams: [1]\n", "u.yaml"),
        ] {
            let e = parse_file(bad, Path::new("u.yaml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && e.starts_with("u.yaml: "), "{e}");
        }
        assert!(parse_file("", Path::new("u.yaml")).unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_upstream_and_the_field() {
        let e = parse_flag("eu=ftp://a:1").unwrap_err();
        assert!(
            matches!(e, ConfigError::Upstream(UpstreamError::Scheme { .. })),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "upstream eu: url \"ftp://a:1\" must start with http:// or https://"
        );
        let e = parse_flag("eu").unwrap_err();
        assert_eq!(e.to_string(), "--upstream \"eu\": expected NAME=URL");
        let Err(e) = load(Path::new("/nonexistent/upstreams.yaml"), &[]) else {
            panic!("a missing file loads");
        };
        assert!(
            e.to_string()
                .starts_with("--upstreams /nonexistent/upstreams.yaml: "),
            "{e}"
        );
        let e = parse_file("a: 1\n---\nb: 2\n", Path::new("u.yaml")).unwrap_err();
        assert_eq!(e.to_string(), "u.yaml: expected one document");
    }
}
