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
		return fmt.Errorf("asking etcd whether it enforces authentication: %w", err)
	}
	if !status.Enabled {
		return errors.New("etcd does not enforce authentication, so a user of the tenant's own would keep nothing from it: turn it on (etcdctl auth enable), or take the servers out of the datastore Secret")
	}
	if _, err := cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("adding the etcd user %s: %w", name, err)
	}
	if _, err := cli.RoleAdd(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("adding the etcd role %s: %w", name, err)
	}
	role, err := cli.RoleGet(ctx, name)
	if err != nil {
		return fmt.Errorf("reading the etcd role %s: %w", name, err)
	}
	held := map[apiserver.EtcdKeyRange]bool{}
	for _, p := range role.Perm {
		r := apiserver.EtcdKeyRange{Key: string(p.Key), End: string(p.RangeEnd)}
		if p.PermType != authpb.READWRITE || !wanted(perms, r) {
			if _, err := cli.RoleRevokePermission(ctx, name, r.Key, r.End); err != nil && !errors.Is(err, rpctypes.ErrPermissionNotGranted) {
				return fmt.Errorf("revoking the etcd role %s's permission on %q: %w", name, r.Key, err)
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
			return fmt.Errorf("granting the etcd role %s read and write on %q: %w", name, r.Key, err)
		}
	}
	if _, err := cli.UserGrantRole(ctx, name, name); err != nil {
		return fmt.Errorf("granting the etcd user %s its role: %w", name, err)
	}
	// Its role alone: any other, granted by hand, goes.
	user, err := cli.UserGet(ctx, name)
	if err != nil {
		return fmt.Errorf("reading the etcd user %s: %w", name, err)
	}
	for _, role := range user.Roles {
		if role == name {
			continue
		}
		if _, err := cli.UserRevokeRole(ctx, name, role); err != nil && !errors.Is(err, rpctypes.ErrRoleNotGranted) {
			return fmt.Errorf("revoking role %s from the etcd user %s: %w", role, name, err)
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
		return fmt.Errorf("deleting the etcd user %s: %w", name, err)
	}
	if _, err := cli.RoleDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("deleting the etcd role %s: %w", name, err)
	}
	return nil
}

// EnsureUser is EnsureEtcdUser on the etcd of endpoints, reached as
// tlsConfig's certificate (its root user).
func (e EtcdV3) EnsureUser(ctx context.Context, endpoints []string, tlsConfig *tls.Config, name string, perms []apiserver.EtcdKeyRange) error {
	cli, err := e.Client(endpoints, tlsConfig)
	if err != nil {
		return err
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
		return err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 2*e.RequestTimeout())
	defer cancel()
	return RemoveEtcdUser(ctx, cli, name)
}
