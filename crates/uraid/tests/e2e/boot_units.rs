//! The systemd units of contrib/systemd as a machine would load them: an
//! fstab line naming the array's ublk device (`/dev/uraid/NAME`) is turned
//! into its mount unit by systemd's own fstab generator, and
//! `systemd-analyze verify` loads that mount with uraid@NAME.service,
//! uraid-monitor.service and uraid-scan.service: no error, no warning, and
//! no ordering cycle (with the default dependencies, the serve would come
//! after basic.target, so after local-fs.target, which the mount comes
//! before: systemd breaks such a cycle by dropping a start job at boot).

use std::path::Path;
use std::process::Command;

use crate::util::*;

/// The units of contrib/systemd, with ExecStart on the binary under test
/// (verify wants an executable there), in `dir` (the instance `data`).
fn install_units(dir: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd");
    for (from, to) in [("uraid@.service", "uraid@data.service"), ("uraid-monitor.service", "uraid-monitor.service"), ("uraid-scan.service", "uraid-scan.service")] {
        let text = std::fs::read_to_string(src.join(from)).unwrap();
        assert!(text.contains("/usr/local/sbin/uraid "), "{from}: ExecStart moved?");
        std::fs::write(dir.join(to), text.replace("/usr/local/sbin/uraid ", &format!("{URAID} "))).unwrap();
    }
}

#[test]
fn an_fstab_mount_of_the_array_orders_after_its_serve_without_a_cycle() {
    require_tool("systemd-analyze", "systemd");
    let generator = Path::new("/lib/systemd/system-generators/systemd-fstab-generator");
    assert!(generator.exists(), "this test needs {}: install the Debian package systemd", generator.display());
    // The two fstab lines README.md documents.
    for opts in ["defaults,x-systemd.after=uraid@data.service", "defaults,x-systemd.requires=uraid@data.service"] {
        let d = tempfile::tempdir().unwrap();
        let (gen, units) = (d.path().join("gen"), d.path().join("units"));
        std::fs::create_dir_all(&gen).unwrap();
        std::fs::create_dir_all(&units).unwrap();
        let fstab = d.path().join("fstab");
        std::fs::write(&fstab, format!("/dev/uraid/data /srv/data ext4 {opts} 0 2\n")).unwrap();
        let g = Command::new(generator).args([&gen, &gen, &gen]).env("SYSTEMD_FSTAB", &fstab).env("SYSTEMD_PROC_CMDLINE", "").output().unwrap();
        assert!(g.status.success(), "fstab generator: {}", String::from_utf8_lossy(&g.stderr));
        let mount = std::fs::read_to_string(gen.join("srv-data.mount")).unwrap();
        assert!(mount.contains("After=uraid@data.service") && mount.contains("Before=local-fs.target"), "{mount}");
        std::fs::write(units.join("srv-data.mount"), &mount).unwrap();
        install_units(&units);
        let v = Command::new("systemd-analyze")
            .args(["verify", "srv-data.mount", "uraid@data.service", "uraid-monitor.service", "uraid-scan.service"])
            .current_dir(&units)
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
        println!("fstab options {opts}: systemd-analyze verify: exit {:?}, output {said:?}", v.status.code());
        assert!(v.status.success() && said.trim().is_empty(), "systemd-analyze verify with fstab options {opts}:\n{said}");
    }
}
