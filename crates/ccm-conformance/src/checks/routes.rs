//! `routes.*`: what the route controller relies on.

use ccm_core::provider::{Route, Routes};
use k8s_openapi::api::core::v1::Node;

use crate::context::{Checked, Ctx, Stop, fail, node_name, unexpected};

fn for_cidr<'a>(routes: &'a [Route], cidr: &str) -> Vec<&'a Route> {
    routes
        .iter()
        .filter(|r| r.destination_cidr == cidr)
        .collect()
}

/// `list_routes(cluster)`, asked until `done` holds or the settle time is up.
async fn list_until(
    ctx: &Ctx,
    routes: &dyn Routes,
    cluster: &str,
    why: &str,
    done: impl Fn(&[Route]) -> bool,
) -> Result<Vec<Route>, Stop> {
    let step = format!("list_routes({cluster:?}) {why}");
    ctx.eventually(
        step.clone(),
        || routes.list_routes(cluster),
        |a| matches!(a, Ok(r) if done(r)),
    )
    .await
    .map_err(|e| unexpected(&step, &e))
}

/// A CIDR the cluster has no route for yet.
async fn free_cidr(ctx: &Ctx, routes: &dyn Routes, cluster: &str) -> Result<String, Stop> {
    let cidr = ctx.route_cidr()?;
    let listed = ctx
        .call(
            format!("list_routes({cluster:?}) before creating any route"),
            routes.list_routes(cluster),
        )
        .await?;
    if !for_cidr(&listed, &cidr).is_empty() {
        return Err(Stop::Error(format!(
            "cluster {cluster:?} already has a route for {cidr}; choose another \
             Options::route_cidr"
        )));
    }
    Ok(cidr)
}

/// Creates a route for `cidr` to `node` and returns it as `list_routes` lists it.
async fn create_and_find(
    ctx: &Ctx,
    routes: &dyn Routes,
    cluster: &str,
    node: &Node,
    cidr: &str,
) -> Result<Route, Stop> {
    let hint = ctx.uid();
    ctx.create_route(cluster, &hint, &Route::new(node_name(node), cidr))
        .await?;
    let listed = list_until(
        ctx,
        routes,
        cluster,
        &format!("after create_route for {cidr}"),
        |r| !for_cidr(r, cidr).is_empty(),
    )
    .await?;
    let found = for_cidr(&listed, cidr);
    match found.as_slice() {
        [] => fail!(
            "list_routes({cluster:?}) does not list the route for {cidr} that create_route \
             made{}: the route controller would create it again on every pass",
            ctx.settled()
        ),
        [route] => {
            if route.target_node != node_name(node) {
                fail!(
                    "list_routes({cluster:?}) lists the route for {cidr} with target_node {:?}, \
                     but create_route made it for Node {:?}: the route controller matches routes \
                     by target node and would replace it",
                    route.target_node,
                    node_name(node)
                );
            }
            if route.blackhole {
                fail!(
                    "list_routes({cluster:?}) lists the route for {cidr} as a blackhole although \
                     its Node's instance exists: the route controller would delete it"
                );
            }
            Ok((*route).clone())
        }
        many => fail!(
            "list_routes({cluster:?}) lists {} routes for {cidr} after one create_route",
            many.len()
        ),
    }
}

/// Deletes `route` as listed and waits until it is no longer listed.
async fn delete_and_confirm(
    ctx: &Ctx,
    routes: &dyn Routes,
    cluster: &str,
    route: &Route,
) -> Result<Vec<Route>, Stop> {
    let cidr = route.destination_cidr.as_str();
    ctx.call(
        format!(
            "delete_route({cluster:?}, the route for {cidr} as list_routes returned it, named {:?})",
            route.name
        ),
        routes.delete_route(cluster, route),
    )
    .await?;
    let listed = list_until(
        ctx,
        routes,
        cluster,
        &format!("after delete_route for {cidr}"),
        |r| for_cidr(r, cidr).is_empty(),
    )
    .await?;
    if !for_cidr(&listed, cidr).is_empty() {
        fail!(
            "list_routes({cluster:?}) still lists the route for {cidr} after delete_route \
             succeeded{}",
            ctx.settled()
        );
    }
    Ok(listed)
}

pub(super) async fn create_list_delete_round_trip(ctx: &Ctx) -> Checked {
    let routes = ctx.routes()?;
    let node = ctx.pool(1).await?.remove(0);
    let cluster = ctx.cluster().to_owned();
    let cidr = free_cidr(ctx, routes, &cluster).await?;
    let route = create_and_find(ctx, routes, &cluster, &node, &cidr).await?;
    delete_and_confirm(ctx, routes, &cluster, &route).await?;
    Ok(None)
}

pub(super) async fn delete_exactly_what_list_returned(ctx: &Ctx) -> Checked {
    let routes = ctx.routes()?;
    let node = ctx.pool(1).await?.remove(0);
    let cluster = ctx.cluster().to_owned();
    let first_cidr = free_cidr(ctx, routes, &cluster).await?;
    let second_cidr = free_cidr(ctx, routes, &cluster).await?;
    let first = create_and_find(ctx, routes, &cluster, &node, &first_cidr).await?;
    let second = create_and_find(ctx, routes, &cluster, &node, &second_cidr).await?;
    let listed = delete_and_confirm(ctx, routes, &cluster, &first).await?;
    match for_cidr(&listed, &second_cidr).as_slice() {
        [kept] if **kept == second => {}
        [] => fail!(
            "deleting the route for {first_cidr} also removed the route for {second_cidr} to the \
             same Node: delete_route must delete exactly the route it is given"
        ),
        [changed] => fail!(
            "deleting the route for {first_cidr} changed the route for {second_cidr}: it was \
             {second:?}, now {changed:?}"
        ),
        many => fail!(
            "after deleting the route for {first_cidr}, list_routes lists {} routes for \
             {second_cidr}",
            many.len()
        ),
    }
    delete_and_confirm(ctx, routes, &cluster, &second).await?;
    Ok(None)
}

pub(super) async fn list_scoped_to_cluster(ctx: &Ctx) -> Checked {
    let routes = ctx.routes()?;
    ctx.set_step("has_cluster_id()");
    if !ctx.provider().has_cluster_id() {
        return Err(Stop::Skip(
            "the provider has no cluster ID (has_cluster_id() is false), so it cannot tell two \
             clusters' routes apart"
                .into(),
        ));
    }
    let node = ctx.pool(1).await?.remove(0);
    let ours = ctx.cluster().to_owned();
    let other = format!("{ours}-other");
    let our_cidr = free_cidr(ctx, routes, &ours).await?;
    let other_cidr = free_cidr(ctx, routes, &other).await?;
    let our_route = create_and_find(ctx, routes, &ours, &node, &our_cidr).await?;
    let other_route = create_and_find(ctx, routes, &other, &node, &other_cidr).await?;
    for (cluster, mine, foreign, foreign_cluster) in [
        (&ours, &our_cidr, &other_cidr, &other),
        (&other, &other_cidr, &our_cidr, &ours),
    ] {
        let listed = list_until(
            ctx,
            routes,
            cluster,
            "with a route in each of two clusters",
            |r| for_cidr(r, foreign).is_empty() && !for_cidr(r, mine).is_empty(),
        )
        .await?;
        if !for_cidr(&listed, foreign).is_empty() {
            fail!(
                "list_routes({cluster:?}) lists the route for {foreign} made in cluster \
                 {foreign_cluster:?}: the route controller of {cluster:?} would delete another \
                 cluster's route"
            );
        }
        if for_cidr(&listed, mine).is_empty() {
            fail!(
                "list_routes({cluster:?}) no longer lists its own route for {mine} once another \
                 cluster has one"
            );
        }
    }
    delete_and_confirm(ctx, routes, &ours, &our_route).await?;
    delete_and_confirm(ctx, routes, &other, &other_route).await?;
    Ok(None)
}
