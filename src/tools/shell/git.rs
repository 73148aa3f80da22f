//! `git`: which subcommands only read, and which destroy work or shared history.
//!
//! Read-only: `status log show diff rev-parse ls-files ls-tree blame annotate describe
//! shortlog cat-file show-ref rev-list merge-base name-rev count-objects check-ignore
//! check-attr for-each-ref whatchanged cherry grep version`, plus the listing forms of
//! `branch`, `tag`, `remote`, `stash`, `config`, `reflog` and `worktree`. Not with
//! `--output` (log/show/diff write a file there), `grep -O` (runs a pager command), or a
//! global `-c`/`--config-env`/`--exec-path` (config can name programs to run).
//!
//! Dangerous: `push` that can discard remote commits (`--force`, `-f`,
//! `--force-with-lease`, `--mirror`, `--delete`, `+ref`, `:ref`), `reset --hard`,
//! `clean -f` (unless `-n`), `checkout -f`, `branch -D`, `stash clear`, `filter-branch`.

use super::rules::short_cluster_has;

/// The index of the subcommand after global options, and whether those options are
/// compatible with a read-only call.
fn subcommand(args: &[&str]) -> Option<(usize, bool)> {
    let mut at = 0;
    let mut read_only = true;
    while let Some(arg) = args.get(at) {
        match *arg {
            "-C" | "--git-dir" | "--work-tree" | "--namespace" => at += 2,
            "-c" | "--config-env" => {
                read_only = false;
                at += 2;
            }
            "--no-pager"
            | "-P"
            | "--no-optional-locks"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-replace-objects"
            | "--bare" => at += 1,
            arg if arg.starts_with("--git-dir=")
                || arg.starts_with("--work-tree=")
                || arg.starts_with("--namespace=") =>
            {
                at += 1;
            }
            arg if arg.starts_with('-') => {
                read_only = false;
                at += 1;
            }
            _ => return Some((at, read_only)),
        }
    }
    None
}

pub(super) fn read_only(args: &[&str]) -> bool {
    let Some((at, true)) = subcommand(args) else {
        return false;
    };
    let rest = &args[at + 1..];
    let has = |options: &[&str]| rest.iter().any(|arg| options.contains(arg));
    let writes_output = rest.iter().any(|arg| arg.starts_with("--output"));
    match args[at] {
        "status" | "rev-parse" | "ls-files" | "ls-tree" | "blame" | "annotate" | "describe"
        | "shortlog" | "cat-file" | "show-ref" | "rev-list" | "merge-base" | "name-rev"
        | "count-objects" | "check-ignore" | "check-attr" | "for-each-ref" | "cherry"
        | "version" => true,
        "log" | "show" | "diff" | "whatchanged" => !writes_output,
        "grep" => !rest
            .iter()
            .any(|arg| arg.starts_with("--open-files-in-pager") || short_cluster_has(arg, &['O'])),
        "branch" => listing(
            rest,
            &[
                "-a",
                "-r",
                "-v",
                "-vv",
                "-l",
                "--list",
                "--all",
                "--remotes",
                "--verbose",
                "--show-current",
                "--no-color",
                "--color",
                "--column",
                "--no-column",
                "--omit-empty",
                "-i",
                "--ignore-case",
            ],
            &[
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
                "--sort",
                "--format",
            ],
            &[
                "-l",
                "--list",
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
            ],
        ),
        "tag" => listing(
            rest,
            &[
                "-l",
                "--list",
                "-n",
                "--column",
                "--no-column",
                "-i",
                "--ignore-case",
                "--omit-empty",
            ],
            &[
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
                "--sort",
                "--format",
            ],
            &[
                "-l",
                "--list",
                "--contains",
                "--no-contains",
                "--merged",
                "--no-merged",
                "--points-at",
            ],
        ),
        "remote" => match rest {
            [] => true,
            [flag] => matches!(*flag, "-v" | "--verbose"),
            [sub, ..] => matches!(*sub, "get-url" | "show"),
        },
        "stash" => matches!(rest.first(), Some(&("list" | "show"))),
        "reflog" => matches!(rest.first(), None | Some(&"show")) && !writes_output,
        "worktree" => rest.first() == Some(&"list"),
        "config" => {
            has(&[
                "--get",
                "--get-all",
                "--get-regexp",
                "--list",
                "-l",
                "--get-urlmatch",
            ]) || matches!(rest.first(), Some(&("get" | "list")))
        }
        _ => false,
    }
}

/// Listing `branch`/`tag`: every option known to list, and names only with a filter.
fn listing(rest: &[&str], flags: &[&str], with_value: &[&str], filters: &[&str]) -> bool {
    let filtered = rest.iter().any(|arg| {
        filters
            .iter()
            .any(|filter| arg.split('=').next() == Some(filter))
    });
    let mut iter = rest.iter();
    while let Some(arg) = iter.next() {
        let name = arg.split('=').next().unwrap_or(arg);
        if flags.contains(arg) || arg.starts_with("--sort=") || arg.starts_with("--format=") {
            continue;
        }
        if with_value.contains(&name) {
            // `--contains` takes an optional commit; a following name is fine as a filter.
            if !arg.contains('=') && !filters.contains(&name) {
                iter.next();
            }
            continue;
        }
        if arg.starts_with('-') || !filtered {
            return false;
        }
    }
    true
}

pub(super) fn danger(args: &[&str]) -> Option<String> {
    let (at, _) = subcommand(args)?;
    let rest = &args[at + 1..];
    let has = |options: &[&str]| rest.iter().any(|arg| options.contains(arg));
    match args[at] {
        "push" => {
            let forced = rest.iter().any(|arg| {
                arg.starts_with("--force")
                    || matches!(*arg, "--mirror" | "--delete" | "--prune")
                    || short_cluster_has(arg, &['f', 'd'])
            });
            let rewriting_refspec = rest
                .iter()
                .skip_while(|arg| arg.starts_with('-'))
                .skip(1)
                .any(|arg| arg.starts_with('+') || arg.starts_with(':'));
            (forced || rewriting_refspec)
                .then(|| "git push that can overwrite or delete remote history".to_owned())
        }
        "reset" => {
            has(&["--hard"]).then(|| "git reset --hard discards uncommitted work".to_owned())
        }
        "clean" => {
            let forced = rest
                .iter()
                .any(|arg| *arg == "--force" || short_cluster_has(arg, &['f']));
            let dry_run = rest
                .iter()
                .any(|arg| *arg == "--dry-run" || short_cluster_has(arg, &['n']));
            (forced && !dry_run).then(|| "git clean -f deletes untracked files".to_owned())
        }
        "checkout" => (has(&["--force"]) || rest.iter().any(|arg| short_cluster_has(arg, &['f'])))
            .then(|| "git checkout --force discards uncommitted work".to_owned()),
        "branch" => rest
            .iter()
            .any(|arg| short_cluster_has(arg, &['D']))
            .then(|| "git branch -D deletes a branch that may not be merged".to_owned()),
        "stash" => {
            (rest.first() == Some(&"clear")).then(|| "git stash clear drops every stash".to_owned())
        }
        "filter-branch" => Some("git filter-branch rewrites history".to_owned()),
        _ => None,
    }
}
