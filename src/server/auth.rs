//! Bearer-token authentication. Tokens come from a file, one per line:
//!
//! ```text
//! # TOKEN            NAME        SCOPES
//! 3f9c…e1            scheduler   resolver
//! 77ab…09            platform    resolver,definitions
//! 5d20…7c            prometheus  metrics
//! a1b2…ff            admin       *
//! ```
//!
//! Scopes name what a token may use: `resolver` (`kartograf.v1.WorkloadResolver`, but for
//! `Patch`), `patch` (`WorkloadResolver.Patch`: computing changes is more than reading),
//! `definitions` (`kartograf.v1.Definitions`), `metrics` (the admin port's `/metrics`, when
//! the server runs with `--metrics-auth`) or `*` (everything). Every line must name its
//! scopes: a line `TOKEN NAME` is an error, so a file cut short while it is written never
//! grants more than it says. Health `Check` is always open (kubelet probes); everything else on
//! the gRPC port, reflection and health `Watch` included, needs a valid token with a gRPC
//! scope (a `metrics`-only token gets none of it).
//!
//! The file is re-read when its content changes; a file that is unreadable, not a regular
//! file, larger than [`MAX_TOKEN_FILE_BYTES`], changed while it was read, or that no longer
//! parses keeps the last good set (logged, and counted by [`Tokens::rejected`]). Writers
//! must write a new file and rename it over the old one (as Kubernetes Secret mounts do): a
//! read then sees the old file or the new one whole. Tokens are kept only as SHA-256
//! digests and are never logged: errors name the line, not the token.

use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// The health check method, which never needs a token (kubelet probes send none). Health
/// `Watch` streams do.
pub const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// The one method the `patch` scope opens (and `resolver` does not).
pub const PATCH: &str = "/kartograf.v1.WorkloadResolver/Patch";

type Digest = [u8; 32];

/// Largest token file read (a larger one is rejected and the last good set stays).
pub const MAX_TOKEN_FILE_BYTES: u64 = 1 << 20;

/// What one token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The name the token file gives it (used in messages, never the token).
    pub name: String,
    /// Services it may call; empty means all (`*`).
    scopes: Vec<Scope>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Resolver,
    Patch,
    Definitions,
    Metrics,
}

impl Scope {
    /// The gRPC service the scope opens, if any.
    fn service(self) -> Option<&'static str> {
        match self {
            Scope::Resolver | Scope::Patch => Some("kartograf.v1.WorkloadResolver"),
            Scope::Definitions => Some("kartograf.v1.Definitions"),
            Scope::Metrics => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scope::Resolver => "resolver",
            Scope::Patch => "patch",
            Scope::Definitions => "definitions",
            Scope::Metrics => "metrics",
        }
    }
}

impl Grant {
    fn allows(&self, scope: Scope) -> bool {
        self.scopes.is_empty() || self.scopes.contains(&scope)
    }

    fn scope_names(&self) -> String {
        let names: Vec<&str> = self.scopes.iter().map(|s| s.name()).collect();
        names.join(",")
    }
}

/// The scope a read of the web view needs: that of the gRPC service whose data it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadScope {
    /// Workloads, totals, the live feed (`kartograf.v1.WorkloadResolver`).
    Resolver,
    /// Definitions and sources (`kartograf.v1.Definitions`).
    Definitions,
}

/// A parsed token file.
#[derive(Debug, Default)]
struct TokenSet {
    by_digest: HashMap<Digest, Grant>,
}

/// Tokens loaded from a file and reloaded when it changes.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    set: ArcSwap<TokenSet>,
    content: parking_lot::Mutex<Vec<u8>>,
    /// Why the current content is not in effect.
    rejected: parking_lot::Mutex<Option<String>>,
}

/// The token file's text: a regular file of at most [`MAX_TOKEN_FILE_BYTES`], read whole
/// and unchanged while read (a file that is not text is refused, unquoted).
fn read(path: &Path) -> Result<String, crate::folder::read::ReadError> {
    crate::folder::read::text_file(path, MAX_TOKEN_FILE_BYTES)
}

fn digest(token: &[u8]) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, token);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Why the token file cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// It cannot be read (or is not a text file within the size bound).
    #[error("token file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::folder::read::ReadError,
    },
    /// Its content is refused.
    #[error("token file {}: {source}", .path.display())]
    Content {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: TokenFileProblem,
    },
}

/// What is wrong in a token file's content (a message never shows a token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenFileProblem {
    /// A line without a token and a name.
    #[error("line {line}: expected `TOKEN NAME SCOPES` (the token is not shown)")]
    Shape {
        /// The line number (from 1).
        line: usize,
    },
    /// A scope that does not exist.
    #[error(
        "line {line} ({name}): unknown scope {:?}; use resolver, patch, definitions, metrics or *",
        crate::excerpt::echo(.scope)
    )]
    UnknownScope {
        /// The line number (from 1).
        line: usize,
        /// The token's name (a bounded excerpt).
        name: String,
        /// The scope.
        scope: String,
    },
    /// A token without scopes.
    #[error(
        "line {line} ({name}): no scopes; name them (resolver, patch, definitions, metrics, or * for all)"
    )]
    NoScopes {
        /// The line number (from 1).
        line: usize,
        /// The token's name (a bounded excerpt).
        name: String,
    },
    /// A token shorter than 16 characters.
    #[error("line {line} ({name}): token shorter than 16 characters")]
    Short {
        /// The line number (from 1).
        line: usize,
        /// The token's name (a bounded excerpt).
        name: String,
    },
    /// A token given twice.
    #[error("line {line} ({name}): duplicate token")]
    Duplicate {
        /// The line number (from 1).
        line: usize,
        /// The token's name (a bounded excerpt).
        name: String,
    },
    /// A reloaded file without tokens (most likely half-written).
    #[error("the file now has no tokens")]
    NowEmpty,
}

fn parse(text: &str) -> Result<TokenSet, TokenFileProblem> {
    let mut set = TokenSet::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(token), Some(name)) = (fields.next(), fields.next()) else {
            return Err(TokenFileProblem::Shape { line: n + 1 });
        };
        let name = crate::excerpt::echo(name).into_owned();
        let mut scopes = Vec::new();
        let mut named = false;
        for s in fields.flat_map(|f| f.split(',')).filter(|s| !s.is_empty()) {
            named = true;
            match s {
                "*" => scopes.clear(),
                "resolver" => scopes.push(Scope::Resolver),
                "patch" => scopes.push(Scope::Patch),
                "definitions" => scopes.push(Scope::Definitions),
                "metrics" => scopes.push(Scope::Metrics),
                other => {
                    return Err(TokenFileProblem::UnknownScope {
                        line: n + 1,
                        name,
                        scope: other.to_owned(),
                    });
                }
            }
            if s == "*" {
                break;
            }
        }
        if !named {
            return Err(TokenFileProblem::NoScopes { line: n + 1, name });
        }
        if token.len() < 16 {
            return Err(TokenFileProblem::Short { line: n + 1, name });
        }
        let grant = Grant {
            name: name.clone(),
            scopes,
        };
        if set
            .by_digest
            .insert(digest(token.as_bytes()), grant)
            .is_some()
        {
            return Err(TokenFileProblem::Duplicate { line: n + 1, name });
        }
    }
    Ok(set)
}

impl Tokens {
    /// Loads the token file; an unreadable or invalid file is an error naming the line.
    pub fn load(path: &Path) -> Result<Tokens, TokenFileError> {
        let content = read(path).map_err(|source| TokenFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        let set = parse(&content).map_err(|source| TokenFileError::Content {
            path: path.to_owned(),
            source,
        })?;
        if set.by_digest.is_empty() {
            tracing::warn!(file = %path.display(), "token file has no tokens: every call except health is refused");
        }
        Ok(Tokens {
            path: path.to_path_buf(),
            set: ArcSwap::from_pointee(set),
            content: parking_lot::Mutex::new(content.into_bytes()),
            rejected: Default::default(),
        })
    }

    /// Number of tokens currently accepted.
    pub fn len(&self) -> usize {
        self.set.load().by_digest.len()
    }

    /// True when no token is accepted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Re-reads the file if its content changed. Returns whether a new set was published;
    /// on any error the last good set stays (see [`Tokens::rejected`]).
    pub fn reload(&self) -> bool {
        let content = match read(&self.path) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(file = %self.path.display(), error = %e, "token file not read; keeping the previous tokens");
                self.reject(e.to_string());
                return false;
            }
        };
        let mut last = self.content.lock();
        if *last == content.as_bytes() {
            return false;
        }
        let outcome = parse(&content).and_then(|set| {
            if set.by_digest.is_empty() {
                // Most likely a half-written file: revoking everyone is never what was meant.
                Err(TokenFileProblem::NowEmpty)
            } else {
                Ok(set)
            }
        });
        *last = content.into_bytes();
        match outcome {
            Ok(set) => {
                tracing::info!(file = %self.path.display(), tokens = set.by_digest.len(), "token file reloaded");
                self.set.store(Arc::new(set));
                *self.rejected.lock() = None;
                true
            }
            Err(e) => {
                tracing::warn!(file = %self.path.display(), error = %e, "token file rejected; keeping the previous tokens");
                self.reject(e.to_string());
                false
            }
        }
    }

    fn reject(&self, why: String) {
        *self.rejected.lock() = Some(why);
    }

    /// Why the file's current content was rejected (the last good set is in effect), if it
    /// was.
    pub fn rejected(&self) -> Option<String> {
        self.rejected.lock().clone()
    }

    /// Re-reads the file every `every` (content-compared, so ConfigMap/Secret symlink swaps
    /// are seen too) until the task is dropped.
    pub fn spawn_reloader(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let tokens = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                tokens.reload();
            }
        })
    }

    /// The grant of the bearer token in an `authorization` header value; UNAUTHENTICATED
    /// when there is none or it is unknown.
    fn grant(&self, authorization: Option<&[u8]>) -> Result<Grant, Status> {
        let Some(header) = authorization else {
            return Err(Status::unauthenticated(
                "missing credentials: send the metadata `authorization: Bearer <token>`",
            ));
        };
        let token = header
            .strip_prefix(b"Bearer ")
            .or_else(|| header.strip_prefix(b"bearer "))
            .ok_or_else(|| {
                Status::unauthenticated(
                    "the authorization metadata must have the form `Bearer <token>`",
                )
            })?;
        let set = self.set.load();
        set.by_digest
            .get(&digest(token.trim_ascii()))
            .cloned()
            .ok_or_else(|| {
                Status::unauthenticated("unknown bearer token (it may have been revoked)")
            })
    }

    /// Decides whether a call to `path` with this `authorization` header may proceed.
    pub fn authorize(&self, path: &str, authorization: Option<&[u8]>) -> Result<(), Status> {
        if path == HEALTH_CHECK {
            return Ok(());
        }
        let grant = self.grant(authorization)?;
        if grant.scopes.is_empty() {
            return Ok(());
        }
        let service = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let grpc_scopes = [Scope::Resolver, Scope::Patch, Scope::Definitions];
        if !grpc_scopes.iter().any(|s| grant.allows(*s)) {
            return Err(Status::permission_denied(format!(
                "token {:?} may not call the gRPC API (its scopes: {}); add resolver, patch or definitions in the token file",
                grant.name,
                grant.scope_names()
            )));
        }
        if path == PATCH {
            return if grant.allows(Scope::Patch) {
                Ok(())
            } else {
                Err(Status::permission_denied(format!(
                    "token {:?} may not call {PATCH} (its scopes: {}); reading is not enough: add the scope \"patch\" in the token file",
                    grant.name,
                    grant.scope_names()
                )))
            };
        }
        let grpc_scopes = [Scope::Resolver, Scope::Definitions];
        match grpc_scopes.iter().find(|s| s.service() == Some(service)) {
            Some(needed) if !grant.allows(*needed) => Err(Status::permission_denied(format!(
                "token {:?} may not call {service} (its scopes: {}); add the scope {:?} in the token file",
                grant.name,
                grant.scope_names(),
                needed.name()
            ))),
            _ => Ok(()),
        }
    }

    /// Decides whether a scrape of `/metrics` with this `authorization` header may proceed:
    /// UNAUTHENTICATED without a known token, PERMISSION_DENIED for a token without the
    /// `metrics` scope (or `*`).
    /// Checks a bearer token for the web view's data: it needs the read `scope` (as the
    /// gRPC service of that data does).
    pub fn authorize_read(
        &self,
        authorization: Option<&[u8]>,
        scope: ReadScope,
    ) -> Result<(), Status> {
        let grant = self.grant(authorization)?;
        let (needed, name) = match scope {
            ReadScope::Resolver => (Scope::Resolver, "resolver"),
            ReadScope::Definitions => (Scope::Definitions, "definitions"),
        };
        if grant.allows(needed) {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "token {:?} may not read this (its scopes: {}); it needs the scope \"{name}\"",
                grant.name,
                grant.scope_names()
            )))
        }
    }

    pub fn authorize_metrics(&self, authorization: Option<&[u8]>) -> Result<(), Status> {
        let grant = self.grant(authorization)?;
        if grant.allows(Scope::Metrics) {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "token {:?} may not read /metrics (its scopes: {}); add the scope \"metrics\" in the token file",
                grant.name,
                grant.scope_names()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Tokens {
        Tokens {
            path: PathBuf::new(),
            set: ArcSwap::from_pointee(parse(text).expect("valid token file")),
            content: Default::default(),
            rejected: Default::default(),
        }
    }

    const RESOLVE: &str = "/kartograf.v1.WorkloadResolver/Resolve";
    const VALIDATE: &str = "/kartograf.v1.Definitions/ValidateDefinition";

    #[test]
    fn scopes_decide_per_service() {
        let t = tokens("# c\naaaaaaaaaaaaaaaa sched resolver\nbbbbbbbbbbbbbbbb admin *\n");
        assert!(
            t.authorize(RESOLVE, Some(b"Bearer aaaaaaaaaaaaaaaa"))
                .is_ok()
        );
        let denied = t
            .authorize(VALIDATE, Some(b"Bearer aaaaaaaaaaaaaaaa"))
            .unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(denied.message().contains("sched"));
        assert!(!denied.message().contains("aaaaaaaa"));
        assert!(
            t.authorize(VALIDATE, Some(b"Bearer bbbbbbbbbbbbbbbb"))
                .is_ok()
        );
        assert_eq!(
            t.authorize(RESOLVE, Some(b"Bearer cccccccccccccccc"))
                .unwrap_err()
                .code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            t.authorize(RESOLVE, None).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            t.authorize(RESOLVE, Some(b"Basic abc")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert!(t.authorize("/grpc.health.v1.Health/Check", None).is_ok());
    }

    #[test]
    fn patch_needs_its_own_scope_and_opens_nothing_else() {
        let t = tokens(
            "rrrrrrrrrrrrrrrr reader resolver\npppppppppppppppp planner patch\naaaaaaaaaaaaaaaa admin *\n",
        );
        let reader = t
            .authorize(PATCH, Some(b"Bearer rrrrrrrrrrrrrrrr"))
            .unwrap_err();
        assert_eq!(reader.code(), tonic::Code::PermissionDenied);
        assert!(
            reader.message().contains("\"patch\""),
            "{}",
            reader.message()
        );
        assert!(t.authorize(PATCH, Some(b"Bearer pppppppppppppppp")).is_ok());
        assert_eq!(
            t.authorize(RESOLVE, Some(b"Bearer pppppppppppppppp"))
                .unwrap_err()
                .code(),
            tonic::Code::PermissionDenied
        );
        assert!(t.authorize(PATCH, Some(b"Bearer aaaaaaaaaaaaaaaa")).is_ok());
    }

    #[test]
    fn the_metrics_scope_opens_metrics_and_nothing_on_grpc() {
        let t = tokens(
            "pppppppppppppppp prom metrics\naaaaaaaaaaaaaaaa all *\nrrrrrrrrrrrrrrrr sched resolver\nmmmmmmmmmmmmmmmm both resolver,metrics\n",
        );
        let bearer = |c: char| format!("Bearer {}", c.to_string().repeat(16));
        assert!(t.authorize_metrics(Some(bearer('p').as_bytes())).is_ok());
        assert!(
            t.authorize_metrics(Some(bearer('a').as_bytes())).is_ok(),
            "* includes metrics"
        );
        assert!(t.authorize_metrics(Some(bearer('m').as_bytes())).is_ok());
        let e = t
            .authorize_metrics(Some(bearer('r').as_bytes()))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("sched") && e.message().contains("metrics"));
        assert_eq!(
            t.authorize_metrics(None).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            t.authorize_metrics(Some(b"Bearer unknownunknownunknown"))
                .unwrap_err()
                .code(),
            tonic::Code::Unauthenticated
        );
        // A metrics-only token gets nothing on the gRPC port but health checks.
        for path in [
            RESOLVE,
            VALIDATE,
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ] {
            let e = t.authorize(path, Some(bearer('p').as_bytes())).unwrap_err();
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{path}");
        }
        assert!(t.authorize(HEALTH_CHECK, None).is_ok());
        assert!(t.authorize(RESOLVE, Some(bearer('m').as_bytes())).is_ok());
        assert!(t.authorize(VALIDATE, Some(bearer('m').as_bytes())).is_err());
    }

    #[test]
    fn bad_files_name_the_line_not_the_token() {
        let e = parse("secretsecretsecret1\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && !e.contains("secretsecret"), "{e}");
        let e = parse("short n resolver\n").unwrap_err().to_string();
        assert!(e.contains("shorter") && !e.contains("short n"), "{e}");
        let e = parse("aaaaaaaaaaaaaaaa n bogus\n").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = parse("aaaaaaaaaaaaaaaa a *\naaaaaaaaaaaaaaaa b *\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("duplicate"), "{e}");
    }

    #[test]
    fn a_line_without_scopes_is_an_error_not_every_scope() {
        let e = parse("aaaaaaaaaaaaaaaa sched\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("no scopes"), "{e}");
        assert!(!e.contains("aaaaaaaa"), "{e}");
        // A comma alone names no scope either.
        assert!(parse("aaaaaaaaaaaaaaaa sched ,\n").is_err());
        let all = parse("aaaaaaaaaaaaaaaa admin *\n").unwrap();
        assert!(all.by_digest.values().all(|g| g.scopes.is_empty()));
    }

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kartograf-auth-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn every_prefix_of_a_file_being_written_keeps_or_narrows_the_grants() {
        let d = temp("prefix");
        let path = d.join("tokens");
        let good = "rrrrrrrrrrrrrrrr sched resolver\nmmmmmmmmmmmmmmmm prom metrics\n";
        std::fs::write(&path, good).unwrap();
        let t = Tokens::load(&path).unwrap();
        let next = "rrrrrrrrrrrrrrrr sched resolver\nmmmmmmmmmmmmmmmm prom metrics\nnnnnnnnnnnnnnnnn new resolver,definitions\n";
        // Whatever prefix a reader sees while the file is rewritten in place, no token gets
        // a scope it has in neither the old file nor the new one.
        for cut in 0..=next.len() {
            std::fs::write(&path, &next[..cut]).unwrap();
            t.reload();
            let bearer = |c: char| format!("Bearer {}", c.to_string().repeat(16));
            assert!(
                t.authorize(VALIDATE, Some(bearer('r').as_bytes())).is_err(),
                "cut {cut}"
            );
            assert!(t.authorize_metrics(Some(bearer('r').as_bytes())).is_err());
            assert!(t.authorize(RESOLVE, Some(bearer('m').as_bytes())).is_err());
            let n = t.authorize(VALIDATE, Some(bearer('n').as_bytes()));
            assert!(n.is_err() || cut >= next.len() - 1, "cut {cut}");
        }
        assert!(t.rejected().is_none(), "the whole file is in effect");
    }

    #[test]
    fn a_rejected_file_keeps_the_last_good_set_and_says_why() {
        let d = temp("rejected");
        let path = d.join("tokens");
        std::fs::write(&path, "rrrrrrrrrrrrrrrr sched resolver\n").unwrap();
        let t = Tokens::load(&path).unwrap();
        let bearer = b"Bearer rrrrrrrrrrrrrrrr";
        for bad in [
            &b"rrrrrrrrrrrrrrrr sched\n"[..],
            b"rrrrrrrrrrrrrrrr sched bogus\n",
            b"\0\0\0",
            b"",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(!t.reload());
            assert!(t.rejected().is_some(), "{bad:?}");
            assert!(t.authorize(RESOLVE, Some(bearer)).is_ok(), "{bad:?}");
        }
        // Replaced by a link to a device or a FIFO: refused at once, the set stays.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert!(!t.reload());
        assert!(t.rejected().unwrap().contains("device"));
        assert!(Tokens::load(&path).is_err());
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "rrrrrrrrrrrrrrrr sched definitions\n").unwrap();
        assert!(t.reload());
        assert!(t.rejected().is_none());
        assert!(t.authorize(RESOLVE, Some(bearer)).is_err());
    }

    #[test]
    fn load_errors_name_the_file_and_the_line() {
        let d = temp("load-errors");
        let path = d.join("tokens");
        std::fs::write(
            &path,
            "aaaaaaaaaaaaaaaa ci resolver\nbbbbbbbbbbbbbbbb ops fly\n",
        )
        .unwrap();
        let e = Tokens::load(&path).unwrap_err();
        assert!(
            matches!(
                &e,
                TokenFileError::Content {
                    source: TokenFileProblem::UnknownScope { line: 2, .. },
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "token file {}: line 2 (ops): unknown scope \"fly\"; use resolver, patch, definitions, metrics or *",
                path.display()
            )
        );
    }
}
