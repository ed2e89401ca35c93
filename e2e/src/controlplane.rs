//! The control plane of scripts/controlplane.sh, started for one test run in a directory of its
//! own (never the default /tmp/kausality-controlplane another engineer may be using), with the
//! audit webhook pointed at kausality-stream, and stopped when dropped.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::repo_root;

pub struct ControlPlane {
    /// `CONTROLPLANE_DIR`: PKI, kubeconfigs, audit logs, component logs.
    pub dir: PathBuf,
    /// Admin kubeconfig of each API server (the first one is the controllers' too).
    pub kubeconfigs: Vec<PathBuf>,
    /// The audit log file each API server writes (same events as its webhook batches).
    pub audit_logs: Vec<PathBuf>,
    running: bool,
}

fn script() -> PathBuf {
    repo_root().join("scripts").join("controlplane.sh")
}

impl ControlPlane {
    /// `scripts/controlplane.sh start` with `apiservers` kube-apiservers (1 or 2) on one etcd,
    /// each sending its audit events to `webhook_url`.
    pub fn start(dir: &Path, webhook_url: &str, apiservers: u8) -> Result<ControlPlane> {
        fs::create_dir_all(dir)?;
        let log = dir.join("controlplane.log");
        let mut cp =
            ControlPlane { dir: dir.to_path_buf(), kubeconfigs: Vec::new(), audit_logs: Vec::new(), running: true };
        let status = cp
            .command("start")
            .env("AUDIT_WEBHOOK_URL", webhook_url)
            .env("CONTROLPLANE_APISERVERS", apiservers.to_string())
            .stdout(Stdio::null())
            .stderr(OpenOptions::new().create(true).append(true).open(&log)?)
            .status()
            .context("running scripts/controlplane.sh start")?;
        if !status.success() {
            cp.running = false; // the script stops what it started when `start` fails
            let text = fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            bail!(
                "scripts/controlplane.sh start failed ({status}):\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        let env = cp.env()?;
        let get =
            |k: &str| env.get(k).map(PathBuf::from).with_context(|| format!("controlplane.sh env printed no {k}"));
        cp.kubeconfigs.push(get("KUBECONFIG")?);
        cp.audit_logs.push(get("CONTROLPLANE_AUDIT_LOG")?);
        if apiservers == 2 {
            cp.kubeconfigs.push(get("CONTROLPLANE_KUBECONFIG2")?);
            cp.audit_logs.push(get("CONTROLPLANE_AUDIT_LOG2")?);
        }
        Ok(cp)
    }

    fn command(&self, sub: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg(script()).arg(sub).env("CONTROLPLANE_DIR", &self.dir).stdin(Stdio::null());
        c
    }

    /// The variables of `controlplane.sh env` (`export K=V` lines, values `%q`-quoted).
    pub fn env(&self) -> Result<HashMap<String, String>> {
        let out = self.command("env").stderr(Stdio::inherit()).output()?;
        if !out.status.success() {
            bail!("scripts/controlplane.sh env failed ({})", out.status);
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), unquote(v)))
            .collect())
    }

    /// `scripts/controlplane.sh stop` (idempotent).
    pub fn stop(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.running, false) {
            return Ok(());
        }
        let log = OpenOptions::new().create(true).append(true).open(self.dir.join("controlplane.log"))?;
        let status = self.command("stop").stdout(Stdio::null()).stderr(log).status()?;
        if !status.success() {
            bail!(
                "scripts/controlplane.sh stop failed ({status}); see {}",
                self.dir.join("controlplane.log").display()
            );
        }
        Ok(())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("e2e: {e:#}");
        }
    }
}

/// Undoes bash's `printf %q` for the plain paths the script prints (backslash escapes only).
fn unquote(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}
