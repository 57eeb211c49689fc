use super::*;

fn node_patch(name: &str, why: &str) -> Planned {
    Planned {
        kind: "nodes".to_owned(),
        namespace: None,
        name: name.to_owned(),
        scope: name.to_owned(),
        action: Action::Update,
        request: format!("PATCH /api/v1/nodes/{name}"),
        why: why.to_owned(),
    }
}

fn names(shadow: &Shadow) -> Vec<(String, String, String)> {
    shadow
        .changes()
        .into_iter()
        .map(|c| (c.controller, c.name, c.why))
        .collect()
}

fn gauge(shadow: &Shadow) -> String {
    let mut registry = Registry::default();
    shadow.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .filter(|l| l.starts_with("ccm_shadow_planned_changes{"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_change_stays_while_each_sync_plans_it_again_and_goes_when_one_does_not() {
    let shadow = Shadow::new();
    let node = shadow.for_controller("cloud-node-controller");
    {
        let _sync = node.syncing("n1");
        node.plan(node_patch("n1", "label a"));
    }
    assert_eq!(names(&shadow).len(), 1, "planned in its sync: kept");
    {
        let _sync = node.syncing("n1");
        node.plan(node_patch("n1", "label a"));
    }
    assert_eq!(names(&shadow).len(), 1, "planned again: one entry, kept");
    {
        let _sync = node.syncing("n2");
    }
    assert_eq!(
        names(&shadow).len(),
        1,
        "another object's sync settles only its own"
    );
    {
        let _sync = node.syncing("n1");
    }
    assert!(shadow.changes().is_empty(), "not planned again: gone");
}

#[test]
fn a_sync_settles_only_its_controller_and_a_pass_every_scope() {
    let shadow = Shadow::new();
    let node = shadow.for_controller("cloud-node-controller");
    let lifecycle = shadow.for_controller("cloud-node-lifecycle-controller");
    node.plan(node_patch("n1", "label"));
    lifecycle.plan(Planned {
        action: Action::Delete,
        request: "DELETE /api/v1/nodes/n1".to_owned(),
        ..node_patch("n1", "")
    });
    lifecycle.plan(Planned {
        action: Action::Delete,
        request: "DELETE /api/v1/nodes/n2".to_owned(),
        ..node_patch("n2", "")
    });
    drop(node.syncing("n1"));
    assert_eq!(
        names(&shadow)
            .iter()
            .map(|(c, n, _)| format!("{c} {n}"))
            .collect::<Vec<_>>(),
        [
            "cloud-node-lifecycle-controller n1",
            "cloud-node-lifecycle-controller n2"
        ]
    );
    let delete_n2 = || {
        lifecycle.plan(Planned {
            action: Action::Delete,
            request: "DELETE /api/v1/nodes/n2".to_owned(),
            ..node_patch("n2", "")
        });
    };
    lifecycle.pass();
    delete_n2();
    assert_eq!(names(&shadow).len(), 2, "the first pass settles nothing");
    lifecycle.pass();
    assert_eq!(
        names(&shadow)
            .iter()
            .map(|(_, n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["n2"],
        "the next pass drops what the previous one did not plan again"
    );
    lifecycle.pass();
    assert!(
        names(&shadow).is_empty(),
        "not planned again in the second pass"
    );
}

#[test]
fn a_sync_that_started_before_a_change_was_planned_does_not_drop_it() {
    // A sync of n1 still running while another records n1's change (the controller's own
    // later sync never overlaps it, but a recorder may be slow): the change is newer.
    let shadow = Shadow::new();
    let node = shadow.for_controller("cloud-node-controller");
    let sync = node.syncing("n1");
    node.plan(node_patch("n1", "label"));
    drop(sync);
    assert_eq!(names(&shadow).len(), 1);
}

#[test]
fn the_gauge_counts_by_controller_kind_and_action_and_the_json_lists_each_change() {
    let shadow = Shadow::new();
    let node = shadow.for_controller("cloud-node-controller");
    node.plan(node_patch("n1", "a"));
    node.plan(node_patch("n2", "b"));
    assert_eq!(
        gauge(&shadow),
        r#"ccm_shadow_planned_changes{controller="cloud-node-controller",kind="nodes",action="update"} 2"#
    );
    node.plan(Planned {
        action: Action::Delete,
        ..node_patch("n2", "b")
    });
    let text = gauge(&shadow);
    assert!(text.contains(r#"action="update"} 1"#), "{text}");
    assert!(text.contains(r#"action="delete"} 1"#), "{text}");
    let json: serde_json::Value = serde_json::from_str(&shadow.to_json()).unwrap();
    let changes = json["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[1]["name"], "n2");
    assert_eq!(changes[1]["action"], "delete");
    assert_eq!(changes[1]["request"], "PATCH /api/v1/nodes/n2");
    assert!(changes[1].get("namespace").is_none(), "cluster-scoped");
    drop(node.syncing("n1"));
    drop(node.syncing("n2"));
    assert_eq!(gauge(&shadow), "", "an empty plan has no series");
}

#[test]
fn why_is_cut_and_the_plan_is_bounded() {
    let shadow = Shadow::new();
    let node = shadow.for_controller("c");
    node.plan(node_patch("n", &"é".repeat(MAX_WHY_BYTES)));
    let why = &shadow.changes()[0].why;
    assert!(why.len() <= MAX_WHY_BYTES + '…'.len_utf8(), "{}", why.len());
    assert!(why.ends_with('…'));
    for i in 0..MAX_PLANNED_CHANGES + 5 {
        node.plan(node_patch(&format!("n{i}"), ""));
    }
    assert_eq!(shadow.changes().len(), MAX_PLANNED_CHANGES);
    assert_eq!(shadow.inner.dropped.get(), 6, "n itself was already in");
}
