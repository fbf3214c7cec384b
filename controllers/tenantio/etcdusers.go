package tenantio

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// EnsureEtcdUser makes the etcd that cli reaches (as its root user) hold
// the user name, without a password (it authenticates by its client
// certificate's common name), with a role of the same name that may read
// and write exactly perms: a permission the role holds beyond them is
// revoked, and so is any other role of the user. An etcd that does not
// enforce authentication is an error: its users keep nothing apart. It is
// idempotent.
func EnsureEtcdUser(ctx context.Context, cli *clientv3.Client, name string, perms []apiserver.EtcdKeyRange) error {
	status, err := cli.AuthStatus(ctx)
	if err != nil {
		return failed("asking whether etcd enforces authentication", cli.Endpoints(), err)
	}
	if !status.Enabled {
		return errors.New("etcd does not enforce authentication, so a user of the tenant's own would keep nothing from it: turn it on (etcdctl auth enable), or take the servers out of the datastore Secret")
	}
	if _, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return failed("adding the etcd user "+name, cli.Endpoints(), err)
	}
	if _, err := cli.RoleAdd(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return failed("adding the etcd role "+name, cli.Endpoints(), err)
	}
	role, err := cli.RoleGet(ctx, name)
	if err != nil {
		return failed("reading the etcd role "+name, cli.Endpoints(), err)
	}
	held := map[apiserver.EtcdKeyRange]bool{}
	for _, p := range role.Perm {
		r := apiserver.EtcdKeyRange{Key: string(p.Key), End: string(p.RangeEnd)}
		if p.PermType != authpb.READWRITE || !wanted(perms, r) {
			if _, err := cli.RoleRevokePermission(ctx, name, r.Key, r.End); err != nil && !errors.Is(err, rpctypes.ErrPermissionNotGranted) {
				return failed(fmt.Sprintf("revoking the etcd role %s's permission on %q", name, r.Key), cli.Endpoints(), err)
			}
			continue
		}
		held[r] = true
	}
	for _, r := range perms {
		if held[r] {
			continue
		}
		if _, err := cli.RoleGrantPermission(ctx, name, r.Key, r.End, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return failed(fmt.Sprintf("granting the etcd role %s read and write on %q", name, r.Key), cli.Endpoints(), err)
		}
	}
	if _, err := cli.UserGrantRole(ctx, name, name); err != nil {
		return failed(fmt.Sprintf("granting the etcd user %s its role", name), cli.Endpoints(), err)
	}
	// Its role alone: any other, granted by hand, goes.
	user, err := cli.UserGet(ctx, name)
	if err != nil {
		return failed("reading the etcd user "+name, cli.Endpoints(), err)
	}
	for _, role := range user.Roles {
		if role == name {
			continue
		}
		if _, err := cli.UserRevokeRole(ctx, name, role); err != nil && !errors.Is(err, rpctypes.ErrRoleNotGranted) {
			return failed(fmt.Sprintf("revoking role %s from the etcd user %s", role, name), cli.Endpoints(), err)
		}
	}
	return nil
}

func wanted(perms []apiserver.EtcdKeyRange, r apiserver.EtcdKeyRange) bool {
	return slices.Contains(perms, r)
}

// RemoveEtcdUser removes the user name and its role from the etcd that cli
// reaches, if they are there.
func RemoveEtcdUser(ctx context.Context, cli *clientv3.Client, name string) error {
	if _, err := cli.UserDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return failed("deleting the etcd user "+name, cli.Endpoints(), err)
	}
	if _, err := cli.RoleDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return failed("deleting the etcd role "+name, cli.Endpoints(), err)
	}
	return nil
}

// EnsureUser is EnsureEtcdUser on the etcd of endpoints, reached as
// tlsConfig's certificate (its root user).
func (e EtcdV3) EnsureUser(ctx context.Context, endpoints []string, tlsConfig *tls.Config, name string, perms []apiserver.EtcdKeyRange) error {
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return failed("making the etcd user "+name, endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 4*e.RequestTimeout())
	defer cancel()
	return EnsureEtcdUser(ctx, cli, name, perms)
}

// RemoveUser is RemoveEtcdUser on the etcd of endpoints.
func (e EtcdV3) RemoveUser(ctx context.Context, endpoints []string, tlsConfig *tls.Config, name string) error {
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return failed("removing the etcd user "+name, endpoints, err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 2*e.RequestTimeout())
	defer cancel()
	return RemoveEtcdUser(ctx, cli, name)
}
