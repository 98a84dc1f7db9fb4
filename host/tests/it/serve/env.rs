//! `${env.NAME}` in a served YAML loop: the variables the tenant's config
//! passes its commands (`[shell] pass_env`), with the values the tenant was
//! given (`tenants.T.env`), never the server's own environment; and never a
//! `LOOPBOX_*` or `PG*` name, whatever the config passes.

use serde_json::json;

use super::shared;

#[test]
fn a_served_loop_reads_the_tenants_passed_values_and_never_the_servers() {
    let srv = shared();
    // The server process has SECRET_KEY in its environment (`Srv::start`);
    // tenant `envs` was given LOOP_VAR and PGPASSWORD, not SECRET_KEY.
    srv.set_config(
        "envs",
        "[shell]\nscripts = true\npass_env = [\"LOOP_VAR\", \"SECRET_KEY\", \"PGPASSWORD\"]\n",
    );
    let proj = srv.root("envs").join("proj");
    std::fs::write(
        proj.join("env.yaml"),
        "name: env\ninitial: write\nstates:\n  write:\n    action: 'printf %s \"${env.LOOP_VAR}/${env.SECRET_KEY:default=unset}\" > env.txt'\n    next: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let r = srv.post(
        "/api/v1/runs",
        srv.token("envs", "operator"),
        json!({"loop": "env.yaml", "workspace": "proj"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let v = srv.wait_final("envs", &id);
    assert_eq!(v["status"], "done", "{v:#}");
    assert_eq!(
        std::fs::read_to_string(proj.join("env.txt")).unwrap(),
        "envs' value/unset"
    );

    // The value is the tenant's credential: no role sees it in the run's view
    // (its input, its start event, its state, the command that used it).
    for role in ["viewer", "admin"] {
        let r = srv.get(&format!("/api/v1/runs/{id}"), srv.token("envs", role));
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(!r.body.contains("envs' value"), "{role}: {}", r.body);
        assert!(
            r.body.contains("(hidden: a value the tenant"),
            "{role}: {}",
            r.body
        );
    }

    // A server-secret name is refused before the run exists, though passed.
    std::fs::write(
        proj.join("pg.yaml"),
        "name: pg\ninitial: write\nstates:\n  write:\n    action: 'echo ${env.PGPASSWORD}'\n    next: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let r = srv.post(
        "/api/v1/runs",
        srv.token("envs", "operator"),
        json!({"loop": "pg.yaml", "workspace": "proj"}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.error().contains(
            "`${env.PGPASSWORD}`: a served loop may not read `LOOPBOX_*` or `PG*` variables"
        ),
        "{}",
        r.body
    );
}
