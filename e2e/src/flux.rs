//! Flux on the e2e control plane: the real kustomize-controller (built by `scripts/flux.sh`)
//! running as `system:serviceaccount:flux-system:kustomize-controller`, and the part of
//! source-controller that the scenario plays itself: it packs the "Git" content into a
//! tarball, serves it over HTTP on 127.0.0.1 and writes the GitRepository's
//! `status.artifact` (URL, revision, digest), which is all kustomize-controller reads of a
//! source (it fetches the artifact and checks its digest).

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;

use crate::controlplane::ControlPlane;
use crate::repo_root;
use crate::serve::{free_port, http_status};
use crate::wait;

/// The namespace and service account kustomize-controller runs as (Flux's defaults).
pub const NAMESPACE: &str = "flux-system";
pub const SERVICE_ACCOUNT: &str = "kustomize-controller";
/// Its user in audit events.
pub const USER: &str = "system:serviceaccount:flux-system:kustomize-controller";

/// `scripts/flux.sh path`: the directory with the binary, `crds.yaml` and `version`.
pub fn flux_dir() -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts").join("flux.sh"))
        .arg("path")
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("kustomize-controller is not built: run scripts/flux.sh build (or KAUSALITY_FLUX=0 to skip the flux scenario)");
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// The version of kustomize-controller that `dir` holds.
pub fn version(dir: &Path) -> String {
    fs::read_to_string(dir.join("version")).map(|v| v.trim().to_string()).unwrap_or_default()
}

fn ignore_conflict<T>(r: kube::Result<T>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A running kustomize-controller; stopped when dropped.
pub struct KustomizeController {
    child: Option<Child>,
    pub log: PathBuf,
    pub version: String,
}

impl KustomizeController {
    /// Installs the Kustomization and GitRepository CRDs, the service account (bound to
    /// cluster-admin, as Flux's own install does), a token for it from the TokenRequest API,
    /// a kubeconfig with that token, and starts the controller with its metrics and health
    /// listeners on 127.0.0.1.
    pub async fn start(cp: &ControlPlane, admin: &Client, dir: &Path) -> Result<KustomizeController> {
        let flux = flux_dir()?;
        let version = version(&flux);
        fs::create_dir_all(dir)?;
        let env = cp.env()?;
        let get = |k: &str| env.get(k).cloned().with_context(|| format!("controlplane.sh env printed no {k}"));
        let (bin, server, ca) =
            (get("CONTROLPLANE_BIN")?, get("CONTROLPLANE_APISERVER_URL")?, get("CONTROLPLANE_CA_FILE")?);

        let crds = Command::new(Path::new(&bin).join("kubectl"))
            .args(["apply", "--server-side", "--force-conflicts", "-f"])
            .arg(flux.join("crds.yaml"))
            .env("KUBECONFIG", &cp.kubeconfigs[0])
            .output()?;
        if !crds.status.success() {
            bail!("installing Flux's CRDs failed: {}", String::from_utf8_lossy(&crds.stderr));
        }
        for crd in ["kustomizations.kustomize.toolkit.fluxcd.io", "gitrepositories.source.toolkit.fluxcd.io"] {
            let status = Command::new(Path::new(&bin).join("kubectl"))
                .args(["wait", "--for=condition=Established", "--timeout=60s"])
                .arg(format!("crd/{crd}"))
                .env("KUBECONFIG", &cp.kubeconfigs[0])
                .stdout(Stdio::null())
                .status()?;
            if !status.success() {
                bail!("CRD {crd} never became Established");
            }
        }

        let ns = Namespace {
            metadata: ObjectMeta { name: Some(NAMESPACE.into()), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        ignore_conflict(Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &ns).await)?;
        let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
        let sa = ServiceAccount {
            metadata: ObjectMeta { name: Some(SERVICE_ACCOUNT.into()), ..ObjectMeta::default() },
            ..ServiceAccount::default()
        };
        ignore_conflict(sas.create(&PostParams::default(), &sa).await)?;
        let crb = ClusterRoleBinding {
            metadata: ObjectMeta { name: Some("e2e-flux-kustomize-controller".into()), ..ObjectMeta::default() },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: "cluster-admin".into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: SERVICE_ACCOUNT.into(),
                namespace: Some(NAMESPACE.into()),
                api_group: None,
            }]),
        };
        ignore_conflict(Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &crb).await)?;
        let request = TokenRequest {
            spec: TokenRequestSpec { expiration_seconds: Some(3600), ..TokenRequestSpec::default() },
            ..TokenRequest::default()
        };
        let token = sas.create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request).await?;
        let token =
            token.status.map(|s| s.token).filter(|t| !t.is_empty()).context("TokenRequest returned no token")?;
        let kubeconfig = dir.join("kustomize-controller.kubeconfig");
        fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {SERVICE_ACCOUNT}\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: {SERVICE_ACCOUNT}\ncurrent-context: e2e\n"
            ),
        )?;

        let (metrics, health) = (free_port()?, free_port()?);
        let log = dir.join("kustomize-controller.log");
        let out = File::create(&log)?;
        let child = Command::new(flux.join("kustomize-controller"))
            .args([
                format!("--metrics-addr={metrics}"),
                format!("--health-addr={health}"),
                "--enable-leader-election=false".into(),
                "--watch-all-namespaces=true".into(),
                "--requeue-dependency=5s".into(),
                "--interval-jitter-percentage=0".into(),
                "--log-level=info".into(),
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUNTIME_NAMESPACE", NAMESPACE)
            .env("HOME", dir)
            .env("TMPDIR", dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting kustomize-controller")?;
        let mut kc = KustomizeController { child: Some(child), log, version };
        let ready = wait::until("kustomize-controller's /readyz", Duration::from_secs(60), || {
            let up = http_status(health, "/readyz") == Some(200);
            let exited = kc.child.as_mut().map(|c| c.try_wait());
            async move {
                if let Some(Ok(Some(status))) = exited {
                    bail!("kustomize-controller exited: {status}");
                }
                Ok(up.then_some(()))
            }
        })
        .await;
        if let Err(e) = ready {
            bail!("{e:#}\n{}", kc.log_tail(40));
        }
        Ok(kc)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        for _ in 0..50 {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for KustomizeController {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What source-controller would write in a GitRepository's `status.artifact`.
#[derive(Clone, Debug)]
pub struct Artifact {
    pub revision: String,
    pub path: String,
    pub url: String,
    pub digest: String,
    pub size: u64,
}

/// Serves the files of a directory over HTTP/1.0 on 127.0.0.1; stopped when dropped.
pub struct ArtifactServer {
    pub addr: SocketAddr,
    pub dir: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ArtifactServer {
    pub fn start(dir: &Path) -> Result<ArtifactServer> {
        fs::create_dir_all(dir)?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (root, flag) = (dir.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(s) = conn {
                    let _ = serve_one(s, &root);
                }
            }
        });
        Ok(ArtifactServer { addr, dir: dir.to_path_buf(), stop, thread: Some(thread) })
    }

    /// Packs `files` (path → content) as the tarball of `revision` (a Git revision as
    /// source-controller writes it, `main@sha1:<40 hex>`) and returns its artifact.
    pub fn publish(&self, revision: &str, files: &[(&str, String)]) -> Result<Artifact> {
        let sha = revision.rsplit(':').next().unwrap_or(revision);
        let tree = self.dir.join(format!("tree-{sha}"));
        if tree.exists() {
            fs::remove_dir_all(&tree)?;
        }
        for (path, content) in files {
            let p = tree.join(path);
            fs::create_dir_all(p.parent().context("a file in a directory")?)?;
            fs::write(&p, content)?;
        }
        let name = format!("{sha}.tar.gz");
        let tarball = self.dir.join(&name);
        let status = Command::new("tar").arg("-czf").arg(&tarball).arg("-C").arg(&tree).arg(".").status()?;
        if !status.success() {
            bail!("tar of {} failed", tree.display());
        }
        let out = Command::new("sha256sum").arg(&tarball).output()?;
        let digest =
            String::from_utf8(out.stdout)?.split_whitespace().next().context("sha256sum printed nothing")?.to_string();
        Ok(Artifact {
            revision: revision.to_string(),
            path: format!("gitrepository/e2e/{name}"),
            url: format!("http://{}/{name}", self.addr),
            digest: format!("sha256:{digest}"),
            size: fs::metadata(&tarball)?.len(),
        })
    }
}

impl Drop for ArtifactServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(s: TcpStream, root: &Path) -> Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(s.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
    let mut s = s;
    let file = root.join(&path);
    match (path.contains(".."), fs::read(&file)) {
        (false, Ok(body)) if file.is_file() => {
            write!(
                s,
                "HTTP/1.0 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            s.write_all(&body)?;
        }
        _ => write!(s, "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?,
    }
    Ok(())
}
