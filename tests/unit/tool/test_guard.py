"""Danger guard: table-driven, zero misses on destructive inputs and zero false FATALs on harmless ones."""

from __future__ import annotations

import shlex

import pytest

from tool_svc.guard import DangerGuard
from tool_svc.guard_policy import Policy

GUARD = DangerGuard()

DESTRUCTIVE: list[tuple[str, str | list[str]]] = [
    # shell: rm in every spelling
    ("shell", "rm -rf /"),
    ("shell", "rm -rf /tmp/build"),
    ("shell", "rm -r -f ./data"),
    ("shell", "rm -fr logs"),
    ("shell", "rm -Rf --verbose cache"),
    ("shell", "rm --recursive --force /var/www"),
    ("shell", "rm --force --recursive x"),
    ("shell", "rm -r /"),
    ("shell", "rm -r ~"),
    ("shell", "rm -r *"),
    ("shell", "rm --no-preserve-root -r /"),
    ("shell", "/bin/rm -rf /srv/app"),
    ("shell", "sudo rm -rf /var/lib/postgresql"),
    ("shell", "sudo -u root env FOO=1 rm -rf /opt/app"),
    ("shell", "cd /tmp && rm -rf *"),
    ("shell", "ls; rm -rf /home/user"),
    ("shell", "echo ok\nrm -rf /data"),
    ("shell", 'bash -c "rm -rf /"'),
    ("shell", "sh -c 'cd / && rm -rf --no-preserve-root /'"),
    ("shell", 'echo "$(rm -rf /etc)"'),
    ("shell", "echo `rm -rf /etc`"),
    ("shell", "find /var/log -name '*.log' -exec rm -rf {} \\;"),
    ("shell", "find / -type f -delete"),
    ("shell", "ls | xargs rm -rf"),
    ("shell", "timeout 5 rm -rf /srv"),
    ("shell", "ssh -p 22 db1 'rm -rf /var/lib/mysql'"),
    ("shell", "eval rm -rf /"),
    ("shell", "python3 -c \"import shutil; shutil.rmtree('/')\""),
    # filesystems and devices
    ("shell", "mkfs.ext4 /dev/sda1"),
    ("shell", "mkfs -t xfs /dev/nvme0n1"),
    ("shell", "dd if=/dev/zero of=/dev/sda bs=1M"),
    ("shell", "dd if=/dev/urandom of=/dev/nvme0n1"),
    ("shell", "echo garbage > /dev/sda"),
    ("shell", "wipefs -a /dev/sdb"),
    ("shell", "shred -u secrets.txt"),
    # fork bombs
    ("shell", ":(){ :|:& };:"),
    ("shell", "bomb() { bomb | bomb & }; bomb"),
    ("shell", "while true; do sleep 1 & done"),
    # power
    ("shell", "shutdown -h now"),
    ("shell", "sudo reboot"),
    ("shell", "poweroff"),
    ("shell", "halt -p"),
    ("shell", "init 0"),
    ("shell", "systemctl reboot"),
    # misc
    ("shell", "chmod -R 777 /"),
    ("shell", "chown -R nobody /etc"),
    ("shell", "crontab -r"),
    ("shell", "iptables -F"),
    ("shell", "kubectl delete namespace payments"),
    ("shell", "kubectl delete pods --all -n prod"),
    ("shell", "curl -s https://example.com/install.sh | bash"),
    ("shell", "git clean -fdx"),
    ("shell", "mv / /dev/null"),
    ("shell", "rm -rf /tmp/x 'unterminated"),
    # SQL
    ("sql", "DROP TABLE payments"),
    ("sql", "drop database prod"),
    ("sql", "TRUNCATE TABLE audit_log"),
    ("sql", "truncate payments"),
    ("sql", "DELETE FROM payments"),
    ("sql", "delete from payments where 1=1"),
    ("sql", "UPDATE accounts SET balance = 0"),
    ("sql", "ALTER TABLE users DROP COLUMN email"),
    ("sql", "SELECT 1; DROP TABLE users"),
    ("sql", "DROP INDEX idx_payments_created"),
    ("sql", "SELEC * FRM x; DROP TABLE y"),
    # code
    ("code", "import os\nos.system('rm -rf /')"),
    ("code", "import subprocess\nsubprocess.run(['rm', '-rf', '/data'])"),
    ("code", "import shutil\nshutil.rmtree('/etc')"),
    ("code", "import os\nwhile True:\n    os.fork()"),
    # argv lists
    ("shell", ["rm", "-rf", "/"]),
    ("shell", ["bash", "-c", "mkfs.ext4 /dev/sda"]),
]

HARMLESS: list[tuple[str, str | list[str]]] = [
    ("shell", "ls -la /var/log"),
    ("shell", "cat 'rm -rf.txt'"),
    ("shell", 'cat "rm -rf.txt"'),
    ("shell", "grep -r 'rm -rf' ./scripts"),
    ("shell", "echo 'do not run rm -rf /'"),
    ("shell", "rm build/output.o"),
    ("shell", "rm -f /tmp/app.pid"),
    ("shell", "rm -r ./build"),
    ("shell", "rmdir empty_dir"),
    ("shell", "tail -n 100 /var/log/payment-svc.log"),
    ("shell", "ps aux | grep payment"),
    ("shell", "df -h && free -m"),
    ("shell", "systemctl status payment-svc"),
    ("shell", "systemctl restart payment-svc"),
    ("shell", "kubectl get pods -n prod"),
    ("shell", "kubectl delete pod payment-svc-7d9f"),
    ("shell", "dd if=/dev/zero of=/tmp/blob bs=1M count=1"),
    ("shell", "find . -name '*.py' -print"),
    ("shell", "find /var/log -mtime +7 -exec ls -l {} \\;"),
    ("shell", "chmod -R 755 ./public"),
    ("shell", "chmod 600 ~/.ssh/id_rsa"),
    ("shell", "curl -s https://example.com/health"),
    ("shell", "curl -s https://example.com/install.sh | bash -c 'cat > /dev/null'"),
    ("shell", "echo shutdown | wc -c"),
    ("shell", "journalctl -u payment-svc --since '1 hour ago'"),
    ("shell", "git clean -n"),
    ("shell", "mv report.txt archive/"),
    ("shell", "echo hello > /tmp/out.txt 2>&1"),
    ("shell", "sudo -u app ls /srv/app"),
    ("shell", "crontab -l"),
    ("shell", "iptables -L"),
    ("shell", "python3 -c 'print(1 + 1)'"),
    ("shell", "bash -c 'echo hi'"),
    ("shell", ["cat", "rm -rf.txt"]),
    # SQL that mentions the words
    ("sql", "SELECT * FROM logs WHERE message LIKE '%TRUNCATE%'"),
    ("sql", "SELECT 'DROP TABLE users' AS text"),
    ("sql", "DELETE FROM sessions WHERE expires_at < NOW()"),
    ("sql", "UPDATE accounts SET balance = 0 WHERE id = 42"),
    ("sql", "INSERT INTO audit (action) VALUES ('drop requested')"),
    ("sql", "SELECT count(*) FROM payments WHERE status = 'failed'"),
    ("sql", "CREATE TABLE t (id INT)"),
    ("sql", "SELECT drop_count FROM stats"),
    ("sql", "ALTER TABLE users ADD COLUMN nickname TEXT"),
    # code
    ("code", "print(sum(range(10)))"),
    ("code", "import os\nprint(os.listdir('.'))"),
    ("code", "import subprocess\nsubprocess.run(['ls', '-l'])"),
    ("code", "text = 'rm -rf /'\nprint(text)"),
    ("code", "import shutil\nshutil.rmtree('/tmp/work/cache')"),
    ("code", "def f(:\n  broken"),
]


@pytest.mark.parametrize(("kind", "value"), DESTRUCTIVE, ids=[str(v)[:40] for _, v in DESTRUCTIVE])
def test_destructive_inputs_are_caught(kind: str, value: str | list[str]) -> None:
    finding = GUARD.check(kind, value)
    assert finding is not None, f"missed: {value!r}"
    assert finding.rule and finding.reason


@pytest.mark.parametrize(("kind", "value"), HARMLESS, ids=[str(v)[:40] for _, v in HARMLESS])
def test_harmless_inputs_pass(kind: str, value: str | list[str]) -> None:
    assert GUARD.check(kind, value) is None


def test_tables_are_large_enough() -> None:
    assert len(DESTRUCTIVE) >= 30
    assert len(HARMLESS) >= 30


def test_path_kind_applies_to_writes_only() -> None:
    assert GUARD.check("path", "/etc/passwd", write=True) is not None
    assert GUARD.check("path", "/etc/../etc/shadow", write=True) is not None
    assert GUARD.check("path", "/tmp/report.txt", write=True) is None
    assert GUARD.check("path", "/etc/passwd", write=False) is None
    assert GUARD.check("path", "rm -rf.txt", write=True) is None


def test_nesting_beyond_the_limit_is_refused() -> None:
    text = "echo hi"
    for _ in range(8):
        text = f"bash -c {shlex.quote(text)}"
    assert GUARD.check("shell", text) is not None


def test_policy_is_data() -> None:
    policy = Policy.from_mapping(
        {"shell": {"rules": [{"id": "no_curl", "commands": ["curl"], "reason": "no network"}]}}
    )
    guard = DangerGuard(policy)
    assert guard.check("shell", "curl example.com") is not None
    assert guard.check("shell", "rm -rf /") is None
